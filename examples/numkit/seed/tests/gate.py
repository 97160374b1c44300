"""The merge gate's test run (the hub runs it on the merged tree; see agensh.toml).

Runs the whole test suite. It passes when every test passes, except the tests of a part
that is still a stub (its function raises NotImplementedError) and that the change being
merged does not touch: the parts nobody has done yet. A part the change touches must pass
all of its tests. Run by hand in a merge commit: python3 tests/gate.py
"""

import subprocess
import sys
import unittest


def changed_parts() -> set[str]:
    """The modules of numkit/ that the merge commit changes against the old main (HEAD^1)."""
    out = subprocess.run(
        ["git", "diff", "--name-only", "HEAD^1", "HEAD", "--", "numkit/"],
        capture_output=True, text=True, check=True).stdout
    return {line.removeprefix("numkit/").removesuffix(".py") for line in out.split()}


def part_of(test: unittest.TestCase) -> str:
    """The part a test belongs to: tests.test_primes.TestPrimes.test_x -> primes (also
    for the stand-in test of a module that fails to import)."""
    module = next(p for p in test.id().split(".") if p.startswith("test_"))
    return module.removeprefix("test_")


def exception_line(trace: str) -> str:
    """The first line of the exception a traceback ends with, e.g. "AssertionError: 1 != 2"."""
    lines = trace.strip().splitlines()
    last_frame = max((i for i, line in enumerate(lines) if line.startswith("  File ")), default=-1)
    after = [line for line in lines[last_frame + 1:] if not line.startswith(" ")]
    return (after[0] if after else lines[-1])[:300]


def main() -> int:
    changed = changed_parts()
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
    failing = {part_of(test) for test, _ in broken}
    done = sorted(parts - stubs - failing)
    print(f"gate: {result.testsRun} tests; parts passing: {', '.join(done) or 'none'}; "
          f"parts not done yet (stubs): {', '.join(sorted(stubs)) or 'none'}")
    for test, last in broken:
        print(f"FAILED {test.id()}: {last}")
    if broken:
        print("refused: fix the part until `python3 -m unittest tests.test_<part>` passes, "
              "commit, push and merge again")
        return 1
    return 0


def suite_tests(suite):
    """Every test case of a (nested) suite."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from suite_tests(item)
        else:
            yield item


if __name__ == "__main__":
    sys.exit(main())
