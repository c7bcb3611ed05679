#!/usr/bin/python3
"""Repeats, after a failed ctest run, what each failed test said about its
failure: its lines that name a failure, and its last lines. ctest prints a
failed test's output where the test ran, which in a long run's log is
often the part a reader (or CI's summary) does not see.

Usage: tests/why_failed.py BUILD_DIR
"""
import os
import re
import sys

SAYS = re.compile(r"\bFAIL|FAILED|Error|error:|Traceback|Assertion|assert|timed out|runtime error")


def main():
    log = os.path.join(sys.argv[1], "Testing", "Temporary", "LastTest.log")
    try:
        text = open(log, encoding="utf-8", errors="replace").read()
    except OSError as e:
        print(f"why_failed: no test log ({e.strerror})")
        return 0
    # One section a test: "N/M Testing: name" ... "Test Passed." / "Test Failed."
    for m in re.finditer(r"^\d+/\d+ Testing: (\S+)\n(.*?)^(Test Passed|Test Failed|Test Not Run)",
                         text, re.S | re.M):
        name, body, verdict = m.group(1), m.group(2), m.group(3)
        if verdict != "Test Failed":
            continue
        out = body.split("Output:\n" + "-" * 58 + "\n", 1)[-1].split("<end of output>", 1)[0]
        lines = [ln for ln in out.splitlines() if ln.strip()]
        said = [ln for ln in lines if SAYS.search(ln) and not ln.lstrip().startswith("ok ")]
        print(f"==== {name} failed; what it said about it:")
        for ln in said[-25:]:
            print("  " + ln[:400])
        print("---- its last lines:")
        for ln in lines[-12:]:
            print("  " + ln[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
