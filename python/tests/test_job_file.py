"""The job-file reader: the same keys and problem texts as ringctl's (ctl/job_yaml.cc)."""

import os
import tempfile
import unittest

import grpc

from ringmaster import JobSpecError, RingmasterError, read_job_spec
from ringmaster import _job_file


class JobFileTest(unittest.TestCase):
    def test_keys_match_ringctl_outline(self):
        # ctl/job_yaml.h lists ringctl's keys (//ctl:job_file_keys_test keeps it in step with the
        # C++ table); a key added there must be added to _job_file.KEYS.
        src = os.environ.get("RINGMASTER_TEST_SRC",
                             os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(src, "ctl", "job_yaml.h"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        start = next(i for i, l in enumerate(lines) if "JobFileKeyOutline() prints them" in l) + 1
        outline = []
        for line in lines[start:]:
            if not line.startswith("//  "):
                break
            outline.append(line[2:])
        self.assertGreater(len(outline), 10)
        self.assertEqual(_job_file.outline_keys(outline), [k.key for k in _job_file.KEYS])

    def test_dict_maps_onto_job_spec(self):
        spec = read_job_spec({
            "name": "hello", "nodes": 2, "devices_per_node": 1,
            "trainer": {"command": ["/bin/echo", "hi"], "steps": 3, "env": {"A": "1", "B": None}},
            "watchdog": {"hang_timeout": "auto", "link_check": False, "straggler_threshold": 1.5,
                         "python_watch": False, "auto_link_check": False,
                         "auto_link_check_interval": 30, "init_timeout": 1200,
                         "checkpoint_timeout": "auto"},
            "restart": {"max_restarts": 0},
        })
        self.assertEqual(spec.name, "hello")
        self.assertEqual(spec.nodes, 2)
        self.assertEqual(list(spec.trainer.command.argv), ["/bin/echo", "hi"])
        self.assertEqual(spec.trainer.steps, 3)
        self.assertEqual(dict(spec.trainer.env), {"A": "1", "B": ""})
        self.assertTrue(spec.watchdog.link_check_disabled)
        self.assertTrue(spec.watchdog.python_watch_disabled)
        self.assertTrue(spec.watchdog.auto_link_check_disabled)
        self.assertEqual(spec.watchdog.auto_link_check_interval_seconds, 30)
        self.assertEqual(spec.watchdog.init_timeout_seconds, 1200)
        self.assertEqual(spec.watchdog.checkpoint_timeout_seconds, 0)
        self.assertEqual(spec.watchdog.straggler_threshold, 1.5)
        self.assertTrue(spec.HasField("restart"))
        self.assertEqual(spec.restart.max_restarts, 0)

    def test_unknown_and_mistyped_keys_are_named(self):
        with self.assertRaises(JobSpecError) as cm:
            read_job_spec({"name": "x", "steps": 1,
                           "trainer": {"stepz": 3, "command": "python3 train.py"},
                           "nodes": "four", "parallelism": {"data": 1 << 40}})
        e = cm.exception
        self.assertIsInstance(e, RingmasterError)
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.problems, [
            "job: steps: unknown key here, did you mean trainer.steps?",
            'job: trainer.stepz: unknown key, did you mean "steps"?',
            'job: trainer.command: expected a list of strings (argv), got "python3 train.py" '
            "(write it as [python3, train.py])",
            'job: nodes: expected an integer, got "four"',
            "job: parallelism.data: out of range [-2147483648, 2147483647], got 1099511627776",
        ])

    def test_builtin_and_command_are_exclusive(self):
        with self.assertRaises(JobSpecError) as cm:
            read_job_spec({"trainer": {"builtin": "gpt", "command": ["/bin/true"]}})
        self.assertEqual(cm.exception.problems,
                         ["job: trainer.command: set builtin or command, not both"])

    def test_yaml_file_errors_carry_line_and_column(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "job.yaml")
            with open(path, "w") as f:
                f.write("name: x\nnodes: 1\ntrainer:\n  command: [/bin/true]\n  stepz: 3\n"
                        "  batch: {micro_batch: four}\n")
            with self.assertRaises(JobSpecError) as cm:
                read_job_spec(path)
            self.assertEqual(cm.exception.problems, [
                path + ':5:3: trainer.stepz: unknown key, did you mean "steps"?',
                path + ':6:11: trainer.batch.micro_batch: expected an integer, got "four"',
                path + ":6:3: trainer.batch: " + _job_file.BUILTIN_ONLY_RULE,
            ])
            with open(path, "w") as f:
                f.write("name: x\nnodes: 1\ntrainer:\n  command: [/bin/true]\n  steps: 2\n"
                        "watchdog: {hang_timeout: 30, link_check: false}\n")
            spec = read_job_spec(path)
            self.assertEqual(spec.trainer.steps, 2)
            self.assertEqual(spec.watchdog.hang_timeout_seconds, 30)
            self.assertTrue(spec.watchdog.link_check_disabled)

    def test_a_command_job_needs_only_its_program(self):
        spec = read_job_spec({"name": "torch", "nodes": 1, "devices_per_node": 2,
                              "trainer": {"command": ["python3", "train.py"]}})
        self.assertEqual(spec.trainer.steps, 0)
        self.assertFalse(spec.trainer.HasField("optimizer"))
        self.assertFalse(spec.watchdog.python_watch_disabled)

    def test_a_command_job_refuses_the_builtin_trainers_keys(self):
        rule = (": only the builtin trainer reads it; a command job's program takes its settings "
                "from its own argv and trainer.env (remove the key, or use builtin: gpt)")
        self.assertEqual(_job_file.BUILTIN_ONLY_RULE, rule[2:])
        with self.assertRaises(JobSpecError) as cm:
            read_job_spec({"trainer": {
                "model": {"layers": 2}, "command": ["python3", "train.py"], "batch": {},
                "steps": 10, "optimizer": {"lr": 1e-3}, "precision": "bf16",
                "attention": "materialized", "zero_stage": 1, "data": {"seed": 0},
                "env": {"A": "1"}}})
        self.assertEqual(cm.exception.problems, [
            "job: trainer." + k + rule for k in
            ("model", "batch", "optimizer", "precision", "attention", "zero_stage", "data")])
        # Unset values are no values (as at the coordinator): zero_stage 0, a null mapping.
        read_job_spec({"trainer": {"command": ["python3"], "zero_stage": 0, "data": None}})
        # In a file, each is pointed at by its key, as ringctl does.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "job.yaml")
            with open(path, "w") as f:
                f.write("name: x\ntrainer:\n  optimizer: {lr: 1.0e-3}\n  command: [python3]\n")
            with self.assertRaises(JobSpecError) as cm:
                read_job_spec(path)
            self.assertEqual(cm.exception.problems, [path + ":3:3: trainer.optimizer" + rule])
        # The builtin trainer's own program reads them; a builtin job too.
        spec = read_job_spec({"trainer": {"command": ["/usr/local/bin/ringmaster-trainer"],
                                          "model": {"layers": 2}, "zero_stage": 1}})
        self.assertEqual(spec.trainer.model.layers, 2)
        spec = read_job_spec({"trainer": {"builtin": "gpt", "precision": "BF16"}})
        self.assertEqual(spec.trainer.precision, 2)

    def test_optimizer_zeros_that_are_set_stay_set(self):
        spec = read_job_spec({"trainer": {"builtin": "gpt", "optimizer": {
            "warmup_steps": 0, "weight_decay": 0, "clip_grad_norm": 0}}})
        o = spec.trainer.optimizer
        self.assertTrue(o.HasField("warmup_steps") and o.HasField("weight_decay")
                        and o.HasField("clip_grad_norm"))
        self.assertFalse(o.HasField("min_lr"))


if __name__ == "__main__":
    unittest.main()
