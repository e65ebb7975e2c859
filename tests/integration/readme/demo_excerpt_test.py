#!/usr/bin/env python3
"""Pins the README's demo excerpt to a real run (ctest readme_demo_excerpt; scripts/demo too).

README.md's "What the demo shows" holds a fenced block with the line
`$ loupe run examples/kda/loupe.toml --config incident --all`; the lines after it, up to the next
line that starts with `$ `, are what that command prints. This runs the command against this
build's loupe and kda (a copy of the objective naming this build's kda, its decode bench without the
batch-128 point, a scratch home), or reads
an output already written (--output, what scripts/demo passes), and compares the two:

- every number is masked (`0.026`, `2.00e-06`, `16384`, `95%` read alike), and so are run ids and
  the home folder (`.loupe` in the README); runs of spaces inside a line count as one;
- a README line ending in `...` matches any line that begins as it does, and `...` inside a line
  matches any text;
- a README line that is only `...` (indented or not) stands for any number of lines;
- every other README line must match the next real line, in order, and no real line may be left
  over.

Words are compared as they are: gate names, layers, verdicts (PASS, FAIL, NOT-RUN), finding ids,
units, the direction of every ratio (`tiled/merged`, "slower than"). The scenario gate compares
wall times on a shared machine, so a run whose output does not match is run once more before the
test fails. Exit 0 when the excerpt states the real output; 1 naming the first README line that
does not match (with the real output); 2 when the README has no such block or loupe could not run.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

COMMAND = "$ loupe run examples/kda/loupe.toml --config incident --all"
RUN_ID = re.compile(r"\br\d{8}-\d{6}-[0-9a-f]{4}\b")
# A number not inside a name (tf32_rz, w8a8, cp_vs_nocp keep their digits): an optional sign,
# digits with an optional fraction, or a fraction, and an optional exponent.
# A number may be followed by x or × ("8.88e+03x the reference's own").
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-wyz_])")
SPACES = re.compile(r"(?<=\S)\s+")


def mask(line, home=None):
    """The line as compared: home, run ids and numbers replaced, inner spaces collapsed."""
    if home:
        for form in sorted({home, os.path.abspath(home)}, key=len, reverse=True):
            line = line.replace(form, ".loupe")
    line = RUN_ID.sub("RUN", line)
    line = NUMBER.sub("#", line)
    return SPACES.sub(" ", line.rstrip())


def excerpt(readme):
    """The README's lines of the incident run's output, with their README line numbers."""
    lines = readme.split("\n")
    try:
        start = next(index for index, line in enumerate(lines) if line.strip() == COMMAND)
    except StopIteration:
        return None
    out = []
    for number in range(start + 1, len(lines)):
        line = lines[number]
        if line.startswith("$ ") or line.startswith("```"):
            break
        out.append((number + 1, line))
    return out


def pattern(line):
    """A README line as a regular expression over masked real lines; None for a gap (`...`)."""
    if line.strip() == "...":
        return None
    parts = mask(line).split("...")
    return re.compile("^" + ".*".join(re.escape(part) for part in parts) + "$")


def compare(expected, real, home):
    """None when the excerpt matches `real` (the output's lines), else why not."""
    masked = [mask(line, home) for line in real]
    position = 0
    for index, (number, line) in enumerate(expected):
        wanted = pattern(line)
        if wanted is None:
            # A gap: skip real lines up to the first that matches the next README line.
            following = next((pattern(text) for _, text in expected[index + 1:]
                              if pattern(text) is not None), None)
            if following is None:
                return None  # the excerpt ends in a gap: whatever follows is fine
            while position < len(masked) and not following.match(masked[position]):
                position += 1
            continue
        if position >= len(masked):
            return "README.md:%d: %r: the real output ended before it" % (number, line)
        if not wanted.match(masked[position]):
            return ("README.md:%d: %r\n  does not state the real line %d: %r\n  (masked: %r "
                    "against %r)" % (number, line, position + 1, real[position],
                                     mask(line), masked[position]))
        position += 1
    if position < len(masked):
        return ("the real output goes on after the excerpt's last line (README.md:%d): %r"
                % (expected[-1][0] if expected else 0, real[position]))
    return None


def run_incident(source_dir, loupe, kda, work_dir):
    """Runs the README's command on a copy of the objective that names this build's kda."""
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    with open(os.path.join(source_dir, "examples/kda/loupe.toml"), encoding="utf-8") as handle:
        text = handle.read()
    if '"build/bin/kda"' not in text or 'working_dir = "../.."' not in text:
        print("demo excerpt: examples/kda/loupe.toml no longer names build/bin/kda with "
              "working_dir ../..; update this test", file=sys.stderr)
        sys.exit(2)
    text = text.replace('"build/bin/kda"', '"%s"' % os.path.abspath(kda))
    text = text.replace('working_dir = "../.."', 'working_dir = "%s"' % os.path.abspath(source_dir))
    # The decode bench's batch-128 point builds a 134 MB state per timed call and samples for its
    # whole 12 s budget a variant: the largest part of this test's time. The excerpt masks every
    # number and shows the gate decided at batch 32 (batch >= 32: 32 and 128 both count), so the
    # copy benches batches 1 and 32 only, with the same budget, precision and verdict rule.
    decode_points = 'params = { batch = [1, 32, 128], H = 16 }'
    if text.count(decode_points) != 1:
        print("demo excerpt: examples/kda/loupe.toml's decode bench no longer has %r; update this "
              "test" % decode_points, file=sys.stderr)
        sys.exit(2)
    text = text.replace(decode_points, 'params = { batch = [1, 32], H = 16 }')
    objective = os.path.join(work_dir, "loupe.toml")
    with open(objective, "w", encoding="utf-8") as handle:
        handle.write(text)
    home = os.path.join(work_dir, "home")
    completed = subprocess.run([loupe, "run", objective, "--config", "incident", "--all",
                                "--home", home], cwd=source_dir, capture_output=True, text=True,
                               timeout=1200)
    if completed.returncode not in (0, 1):
        print("demo excerpt: loupe run exited %d:\n%s" % (completed.returncode, completed.stderr),
              file=sys.stderr)
        sys.exit(2)
    # What the README's command prints: its objective's path, and its subject as the objective names
    # it (reproduce lines give the subject relative to the project root, as `make demo` runs it).
    output = completed.stdout.replace(objective, "examples/kda/loupe.toml")
    return output.replace(os.path.abspath(kda), "build/bin/kda"), home


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--readme", required=True)
    parser.add_argument("--source-dir", help="run the command: the repository root")
    parser.add_argument("--loupe")
    parser.add_argument("--kda")
    parser.add_argument("--work-dir")
    parser.add_argument("--output", help="compare this recorded output instead of running")
    parser.add_argument("--home", default=".loupe", help="the home the recorded output names")
    parser.add_argument("--attempts", type=int, default=2)
    args = parser.parse_args()

    with open(args.readme, encoding="utf-8") as handle:
        expected = excerpt(handle.read())
    if not expected:
        print("demo excerpt: %s has no line %r followed by its output" % (args.readme, COMMAND),
              file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, encoding="utf-8") as handle:
            problem = compare(expected, handle.read().rstrip("\n").split("\n"), args.home)
        if problem:
            print("demo excerpt: README.md's excerpt drifted from %s: %s" % (args.output, problem),
                  file=sys.stderr)
            return 1
        print("demo excerpt: README.md's %d lines state %s" % (len(expected), args.output))
        return 0
    if not (args.source_dir and args.loupe and args.kda and args.work_dir):
        parser.error("give --output, or --source-dir, --loupe, --kda and --work-dir")
    for attempt in range(1, args.attempts + 1):
        output, home = run_incident(args.source_dir, args.loupe, args.kda, args.work_dir)
        problem = compare(expected, output.rstrip("\n").split("\n"), home)
        if problem is None:
            print("demo excerpt: README.md's %d lines state the real run (attempt %d)"
                  % (len(expected), attempt))
            return 0
        print("demo excerpt: attempt %d: %s" % (attempt, problem), file=sys.stderr)
    print("demo excerpt: the last run printed:\n" + output, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
