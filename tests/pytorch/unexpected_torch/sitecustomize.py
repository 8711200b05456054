"""A user's sitecustomize that makes this torch look unlike any the watch knows: once
torch.distributed has imported, its GradBucket loses `is_last` (a binding the watch's DDP comm
hook needs and DDP's own C++ reduction never uses), as in a torch older or newer than the watch.
pytorch_watch_test puts this directory on a job's PYTHONPATH, behind the watch's own
sitecustomize, which chains to this one: the watch must then disable itself, say so once, and
leave the program's results as they are."""
import sys


class _UnexpectedTorch:
    """A meta-path finder first in line: wraps torch.distributed's loader, answers nothing else."""

    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch.distributed" or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(name, path, target)
                    if spec is not None:
                        break
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            if hasattr(module, "GradBucket") and hasattr(module.GradBucket, "is_last"):
                del module.GradBucket.is_last
                sys.stderr.write("unexpected_torch: GradBucket.is_last removed\n")

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _UnexpectedTorch())
