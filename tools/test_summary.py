#!/usr/bin/env python3
"""Counts test cases from a Bazel build-event JSON file and the test.xml files it points to.

Prints "<label>: N passed, N failed, N skipped" and writes the three numbers to stdout's last
line as "COUNTS N N N" for tools/test to add up. A test target with no readable XML counts as one
case with its overall status; a target that failed to build counts as one failure.
"""
import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def count_xml(path):
    passed = failed = skipped = 0
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None or case.get(
                "status") == "notrun":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main(bep_path, label):
    passed = failed = skipped = 0
    results = {}
    build_failures = 0
    with open(bep_path) as f:
        for line in f:
            event = json.loads(line)
            ident = event.get("id", {})
            if "testResult" in ident and "testResult" in event:
                tr = event["testResult"]
                xml = None
                for out in tr.get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        xml = urllib.parse.urlparse(out["uri"]).path
                # Keep the last attempt of each (target, shard, run).
                key = (ident["testResult"]["label"], ident["testResult"].get("shard", 0),
                       ident["testResult"].get("run", 0))
                results[key] = (tr.get("status", "FAILED"), xml)
            if "targetCompleted" in ident and "completed" in event:
                if not event["completed"].get("success", False) and ident["targetCompleted"][
                        "label"].startswith("//"):
                    build_failures += 1
            if "targetCompleted" in ident and "aborted" in event:
                reason = event["aborted"].get("reason", "")
                if reason not in ("SKIPPED", "INCOMPLETE", "USER_INTERRUPTED"):
                    build_failures += 1
    for (target, _, _), (status, xml) in sorted(results.items()):
        counted = False
        if xml:
            try:
                p, fl, s = count_xml(xml)
                if p + fl + s > 0:
                    passed, failed, skipped = passed + p, failed + fl, skipped + s
                    if status != "PASSED" and fl == 0:
                        failed += 1  # E.g. a crash after the last case, or a timeout.
                    counted = True
            except (OSError, ET.ParseError):
                pass
        if not counted:
            if status == "PASSED":
                passed += 1
            else:
                failed += 1
    failed += build_failures
    print(f"{label}: {passed} passed, {failed} failed, {skipped} skipped")
    print(f"COUNTS {passed} {failed} {skipped}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
