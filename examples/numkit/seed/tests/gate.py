"""The merge gate (agensh.toml's [merge] gate runs main's copy of this file on every merge).

The hub runs it in a checkout of the merge commit (the last of a batch of merges) with
AGENSH_GATE_BASE set to main as it was before them. It refuses the merge when the change
touches anything under tests/, then runs the
whole test suite: every test must pass, except the tests of a part that is still a stub
(its function raises NotImplementedError) and that the change does not touch, the parts
nobody has done yet. A part the change touches must pass all of its tests.
"""

import os
import subprocess
import sys
import unittest

# main before the merges under test (HEAD^1 for a single merge, on a hub that does not say).
BASE = os.environ.get("AGENSH_GATE_BASE") or "HEAD^1"


def git(*args: str) -> str:
    """The output of a git command in the merge commit's checkout."""
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def part_of(test: unittest.TestCase) -> str:
    """The part a test belongs to: tests.test_primes.TestPrimes.test_x -> primes (also
    for the stand-in test of a module that fails to import)."""
    module = next(p for p in test.id().split(".") if p.startswith("test_"))
    return module.removeprefix("test_")


def exception_line(trace: str) -> str:
    """The first line of the exception a traceback ends with, e.g. "AssertionError: 1 != 2"."""
    lines = trace.strip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = [line for line in lines[frames[-1] + 1 if frames else 0:] if not line.startswith(" ")]
    return (after[0] if after else lines[-1])[:300]


def suite_tests(suite):
    """Every test case of a (nested) suite."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from suite_tests(item)
        else:
            yield item


def main() -> int:
    edited = git("diff", "--stat", BASE, "HEAD", "--", "tests/")
    if edited:
        print("refused: this change edits tests/, which must stay as on main:")
        print(edited, end="")
        print("undo it: git checkout origin/main -- tests/ && git commit -am 'restore the tests'")
        return 1
    changed = {
        line.removeprefix("numkit/").removesuffix(".py")
        for line in git("diff", "--name-only", BASE, "HEAD", "--", "numkit/").split()
    }
    suite = unittest.defaultTestLoader.discover("tests", top_level_dir=".")
    parts = {part_of(test) for test in suite_tests(suite)}
    result = unittest.TestResult()
    suite.run(result)
    stubs, broken = set(), []
    for test, trace in result.errors:
        last = exception_line(trace)
        if last.startswith("NotImplementedError") and part_of(test) not in changed:
            stubs.add(part_of(test))
        else:
            broken.append((test, last))
    broken += [(test, exception_line(trace)) for test, trace in result.failures]
    done = sorted(parts - stubs - {part_of(test) for test, _ in broken})
    print(f"gate: {result.testsRun} tests; parts passing: {', '.join(done) or 'none'}; "
          f"parts not done yet (stubs): {', '.join(sorted(stubs)) or 'none'}")
    for test, last in broken:
        print(f"FAILED {test.id()}: {last}")
    if broken:
        print("refused: fix the part until `python3 -m unittest tests.test_<part>` passes, "
              "commit, push and merge again")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
