#!/usr/bin/env python3
"""Runs the README's quick start verbatim (ctest readme_quick_start).

A fenced block after `<!-- quick-start: file PATH -->` is written to PATH; the fenced block after
`<!-- quick-start: run -->` is run line by line in one bash session, in a scratch folder whose
HOME is the scratch folder too and whose build/release links to the build under test. A command
passes when it exits 0, or the status its trailing `# exit N` comment names. Exits 0 when every
command did what the README says; 1 naming the first that did not; 2 when the README has no
quick start to run (so the test fails if the markers are lost).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys

MARKER = re.compile(r"^<!-- quick-start: (run|file (\S+)) -->$")


def blocks(readme):
    """Yields (kind, path, text) for each marked fenced block, in order."""
    lines = readme.split("\n")
    index = 0
    while index < len(lines):
        match = MARKER.match(lines[index].strip())
        index += 1
        if not match:
            continue
        if index >= len(lines) or not lines[index].startswith("```"):
            raise SystemExit("quick start: line %d: a marker must be followed by a fenced block"
                             % index)
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        yield ("run" if match.group(1) == "run" else "file", match.group(2),
               "\n".join(lines[start:end]) + "\n")
        index = end + 1


def commands(text):
    """The commands of a run block, with their expected exit status."""
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        expected = 0
        comment = re.search(r"\s#\s*exit (\d+)\b", line)
        if comment:
            expected = int(comment.group(1))
        out.append((number, line, expected))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--readme", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--cxx-flags", default="")
    parser.add_argument("--linker-flags", default="")
    args = parser.parse_args()

    with open(args.readme, encoding="utf-8") as handle:
        found = list(blocks(handle.read()))
    runs = [text for kind, _, text in found if kind == "run"]
    if len(runs) != 1:
        print("quick start: expected one `<!-- quick-start: run -->` block in %s, found %d"
              % (args.readme, len(runs)), file=sys.stderr)
        return 2

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(os.path.join(args.work_dir, "build"))
    os.symlink(os.path.abspath(args.build_dir), os.path.join(args.work_dir, "build", "release"))
    for kind, path, text in found:
        if kind == "file":
            target = os.path.join(args.work_dir, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)

    script = ["set -u"]
    steps = commands(runs[0])
    for number, line, expected in steps:
        script.append(line)
        script.append("status=$?; if [ $status -ne %d ]; then echo \"quick start, line %d of the "
                      "block: exit $status, expected %d: \"%s >&2; exit 1; fi"
                      % (expected, number, expected, shlex.quote(line.strip())))
    script.append("echo \"quick start: %d commands as the README says\"" % len(steps))

    environment = dict(os.environ)
    environment["HOME"] = args.work_dir
    environment.pop("LOUPE_SKELETONS", None)
    environment.pop("LOUPE_HOME", None)
    # An instrumented build (the asan preset) needs its flags in the subject the README builds.
    environment["CXXFLAGS"] = args.cxx_flags
    environment["LDFLAGS"] = args.linker_flags
    result = subprocess.run(["bash", "-c", "\n".join(script)], cwd=args.work_dir, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(result.stdout)
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
