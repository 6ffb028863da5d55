"""The READMEs cannot drift: every shell command they show is classified (platform_tools/readme_commands.py).

``--check`` runs here (fast, nothing executed): a new README command without a rule fails the suite with its
README line. ``make readme-commands`` (run by ``make test`` after the suite) executes the ``run`` commands; the
runner's own logic is tested below on tiny shell blocks (``echo``, ``false``, ``sleep``), in a few seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from platform_tools import readme_commands as rc

ROOT = Path(__file__).resolve().parents[2]


def _commands(text: str, path: str = "README.md") -> list[rc.Command]:
    return [command for block in rc.parse_blocks(path, text) for command in rc.shell_commands(block)]


# -- the repository's READMEs ----------------------------------------------------------------------------------------


def test_every_readme_command_is_classified(capsys: pytest.CaptureFixture[str]) -> None:
    assert rc.main(["--check", "--root", str(ROOT)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert re.search(r"readme-commands: \d+ commands in the shell blocks of \d+ READMEs", out), out


def test_the_classification_of_the_main_commands() -> None:
    found = rc.readme_commands(ROOT)
    assert {"README.md", "constructs/README.md", "examples/causal_lm/README.md"} <= set(found)
    kinds = {(c.command.path, c.command.key): c.rule.kind for c in rc.classify(found) if c.rule is not None}
    assert kinds[("README.md", "make test")] == "ci"
    assert kinds[("README.md", ".venv/bin/gpuctl train --synth --dry-run")] == "run"
    assert kinds[("constructs/README.md", 'pip install "./constructs[nag,codebuild]"')] == "test"
    assert kinds[("containers/training/vendor/README.md", "make vendor-runtime")] == "run"
    assert sum(kind == "run" for kind in kinds.values()) >= 15
    # Nothing that needs an account is run: every such block is marked, so it yields no command.
    aws = re.compile(r"^(aws |gpuctl (train --env|status|logs|stop)\b|npx cdk (deploy|bootstrap|diff|destroy)\b)")
    assert not [c for c in rc.classify(found) if aws.match(c.command.text)]


def test_every_fixture_and_rule_has_its_readme_and_a_reason() -> None:
    tracked = set(rc.tracked_readmes(ROOT))
    assert {fixture.readme for fixture in rc.FIXTURES} <= tracked
    assert all(rule.reason for rule in rc.RULES if rule.kind != "run")


def test_make_test_runs_the_readme_commands_after_the_suite() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert "pytest" in recipe[0] and recipe[1:] == ["\t@$(MAKE) --no-print-directory readme-commands"], recipe
    target = makefile.split("\nreadme-commands: ", 1)[1].splitlines()
    assert target[0].startswith("setup ##") and "platform_tools.readme_commands --run" in target[1], target[:2]


# -- parsing ---------------------------------------------------------------------------------------------------------

FENCES = """# t

```bash
make synth   # a comment
```

1. In a list:

   ```bash
   # needs an AWS account
   aws s3 ls
   ```

````markdown
```bash
not a block of its own
```
````

~~~sh
echo tilde
~~~

```text
gpuctl shard SRC DEST [--image-size 224]
```

```
gpuctl doctor
```

```
epoch=0 step=10 loss=1.0
```
"""


def test_fences_are_parsed_line_by_line() -> None:
    blocks = rc.parse_blocks("README.md", FENCES)
    assert [(b.line, b.language, b.is_shell, b.skip_reason) for b in blocks] == [
        (3, "bash", True, ""),
        (9, "bash", True, "needs an AWS account"),
        (14, "markdown", False, ""),
        (20, "sh", True, ""),
        (24, "text", False, ""),
        (28, "", True, ""),
        (32, "", False, ""),
    ]
    assert blocks[1].lines == ((10, "# needs an AWS account"), (11, "aws s3 ls"))  # the list indentation removed
    assert [c.text for c in _commands(FENCES)] == ["make synth", "echo tilde", "gpuctl doctor"]


def test_a_fence_that_is_never_closed_names_its_line() -> None:
    with pytest.raises(rc.ReadmeError, match=r"^docs/README.md:3: the code block opened here \(```bash\) is never"):
        rc.parse_blocks("docs/README.md", "x\n\n```bash\nmake test\n``\n")


def test_continuations_comments_and_state_lines() -> None:
    text = (
        "```bash\n"
        "export A=1 B=$PWD/x \\\n"
        "       C=2\n"
        "cd examples/lm\n"
        "python -m torch.distributed.run --standalone \\\n"
        "    train.py --epochs 2   # two processes\n"
        'pip install "pkg @ git+https://h/r.git#subdirectory=c"  # install\n'
        "echo 'a # b' \"c # d\" e#f # comment\n"
        "cd sub && ls\n"
        "```\n"
    )
    commands = _commands(text)
    assert [(c.line, c.text) for c in commands] == [
        (5, "python -m torch.distributed.run --standalone train.py --epochs 2"),
        (7, 'pip install "pkg @ git+https://h/r.git#subdirectory=c"'),
        (8, "echo 'a # b' \"c # d\" e#f"),
        (9, "cd sub && ls"),  # not a plain cd: a command
    ]
    assert commands[0].state == ("export A=1 B=$PWD/x C=2", "cd examples/lm")
    assert commands[0].where == "README.md:5" and commands[0].block_line == 1
    with pytest.raises(rc.ReadmeError, match=r"README.md:2: the last command of the block ends with a '\\'"):
        _commands("```bash\nmake \\\n```\n")


def test_strip_comment() -> None:
    assert rc.strip_comment("make synth   # synthesize") == "make synth"
    assert rc.strip_comment("# only a comment") == ""
    assert rc.strip_comment(r"echo \# not a comment") == r"echo \# not a comment"
    assert rc.strip_comment('echo "it\'s # here" # gone') == 'echo "it\'s # here"'


# -- the check -------------------------------------------------------------------------------------------------------


def test_check_names_unclassified_commands_and_stale_rules_and_fixtures(tmp_path: Path) -> None:
    text = "```bash\nmake synth\ngpuctl train --local --channel train=./data\n```\n"
    found = {"README.md": [(b, rc.shell_commands(b)) for b in rc.parse_blocks("README.md", text)]}
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_present():\n    pass\n")
    rules = [
        rc.Rule("README.md", "make   synth", "ci", by=".ci/run", reason="CI runs it"),  # whitespace collapsed
        rc.Rule("README.md", "make old-target", "run"),
        rc.Rule("README.md", "make synth", "test", by="tests/test_x.py::test_absent", reason="x"),
        rc.Rule("docs/README.md", "ls", "not-run"),
    ]
    fixtures = [rc.Fixture("README.md", "images", "images", lambda scratch, env: None, "gpuctl shard ./images")]
    problems = rc.check(tmp_path, found, rules, fixtures)
    assert problems[0].startswith(
        "README.md:3: `gpuctl train --local --channel train=./data` is not classified; add a rule to RULES"
    )
    assert any("rule for README.md `make old-target`: matches no command of README.md any more" in p for p in problems)
    assert any("`make synth`: declared twice" in p for p in problems)
    assert any("tests/test_x.py defines no test_absent" in p for p in problems)
    assert any("docs/README.md is not a git-tracked README.md" in p for p in problems)
    assert any("a not-run rule needs the reason" in p for p in problems)
    assert any("fixture images of README.md: no command there contains `gpuctl shard ./images`" in p for p in problems)
    assert len(problems) == 7, problems


# -- fixtures --------------------------------------------------------------------------------------------------------


def test_image_folder_writes_pngs_that_pillow_reads(tmp_path: Path) -> None:
    root = rc.image_folder(tmp_path / "train", classes=2, per_class=3)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png"))
    assert files == [f"class_{c}/img_{i:03d}.png" for c in range(2) for i in range(3)]
    with Image.open(root / "class_1" / "img_002.png") as image:
        assert (image.format, image.mode, image.size) == ("PNG", "RGB", (48, 40))
        pixels = image.tobytes()
    assert len(pixels) == 48 * 40 * 3 and min(pixels) >= 60 and max(pixels) < 140  # class 1: 60 + [0, 80)
    with pytest.raises(ValueError, match="every row must hold 3 x 2 bytes"):
        rc.write_png(tmp_path / "bad.png", [b"\x00" * 5], 2)


# -- the runner ------------------------------------------------------------------------------------------------------


def _runner(tmp_path: Path, text: str, rules: list[rc.Rule], lines: list[str]) -> rc.ReadmeRunner:
    scratch = tmp_path / "scratch"
    (scratch / "sub").mkdir(parents=True)
    blocks = [(b, rc.shell_commands(b)) for b in rc.parse_blocks("README.md", text) if b.is_shell]
    return rc.ReadmeRunner(
        "README.md", scratch, blocks, {rule.key: rule for rule in rules}, [], tmp_path, lines.append, timeout_s=None
    )


def test_runner_runs_blocks_literally_with_their_state_and_names_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        "```bash\n"
        "export GREETING=hello\n"
        "cd sub\n"
        'echo "$GREETING from $(basename "$PWD"), $AWS_EC2_METADATA_DISABLED, ${AWS_PROFILE:-no profile}"\n'
        "echo to stderr >&2; false\n"
        "echo never\n"
        "```\n"
        "\n"
        "```bash\n"
        'echo second block: $(basename "$PWD")\n'
        "sleep 30\n"
        "```\n"
    )
    rules = [
        rc.Rule("README.md", 'echo "$GREETING from $(basename "$PWD"), $AWS_EC2_METADATA_DISABLED, '
                '${AWS_PROFILE:-no profile}"', "run", output=("hello from sub, true, no profile",)),
        rc.Rule("README.md", "echo to stderr >&2; false", "run"),
        rc.Rule("README.md", "echo never", "run"),
        rc.Rule("README.md", 'echo second block: $(basename "$PWD")', "run", output=("second block: scratch",)),
        rc.Rule("README.md", "sleep 30", "run", timeout_s=0.5),
    ]  # fmt: skip
    lines: list[str] = []
    monkeypatch.setenv("AWS_PROFILE", "someone")
    began = time.monotonic()
    result = _runner(tmp_path, text, rules, lines).run()
    assert time.monotonic() - began < 10
    assert result.ran == 4
    assert [f.where for f in result.failures] == ["README.md:5", "README.md:11"]
    assert re.fullmatch(r"exit status 1 after [\d.]+ s; allowed: 0", result.failures[0].message)
    assert result.failures[1].message == "still running after the time limit of 0.5 s (killed)"
    assert result.failures[0].command == "echo to stderr >&2; false"
    assert result.failures[0].tail == "to stderr"
    assert "[README.md:4] ok (exit 0," in "\n".join(lines)
    assert "[README.md:6] not run: an earlier command of its block failed" in lines
    assert "[README.md:10] ok (exit 0," in "\n".join(lines)


def test_runner_checks_exit_codes_output_and_unchanged_files(tmp_path: Path) -> None:
    (tmp_path / "SUMS").write_text("committed\n")
    text = "```bash\nexit 3\n```\n```bash\necho partial\n```\n```bash\necho changed > SUMS\n```\n"
    rules = [
        rc.Rule("README.md", "exit 3", "run", exit_codes=(0, 3), reason="3 is documented"),
        rc.Rule("README.md", "echo partial", "run", output=("partial", "complete")),
        rc.Rule("README.md", "echo changed > SUMS", "run", unchanged=("SUMS",)),
    ]
    lines: list[str] = []
    runner = _runner(tmp_path, text, rules, lines)
    (runner.scratch / "SUMS").write_text("committed\n")
    result = runner.run()
    assert [(f.where, f.message) for f in result.failures] == [
        ("README.md:5", "exit status 0, but the output lacks ['complete']"),
        ("README.md:8", "SUMS differs from the committed file after the command"),
    ]
    assert "[README.md:2] ok (exit 3," in "\n".join(lines)


def test_command_env_is_an_activated_venv_without_aws(tmp_path: Path) -> None:
    env = rc.command_env(tmp_path, {"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "x", "PYTHONPATH": "/elsewhere",
                                    "MAKEFLAGS": "n", "HOME": "/home/me"})  # fmt: skip
    assert env["PATH"] == f"{tmp_path / '.venv' / 'bin'}{os.pathsep}/usr/bin"
    assert env["VIRTUAL_ENV"] == str(tmp_path / ".venv") and env["HOME"] == "/home/me"
    assert {"AWS_SECRET_ACCESS_KEY", "PYTHONPATH", "MAKEFLAGS"}.isdisjoint(env)
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert not Path(env["AWS_SHARED_CREDENTIALS_FILE"]).exists() and not Path(env["AWS_CONFIG_FILE"]).exists()
    assert Path(env["TMPDIR"]).is_dir() and Path(env["TMPDIR"]).is_relative_to(tmp_path)


def test_repository_cdk_out_is_reused_only_when_fresh(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "dev.yaml").write_text("env_name: dev\nresource_prefix: gpu-dev\n")
    (tmp_path / "app.py").write_text("")
    (tmp_path / "cdk.json").write_text("{}")
    assert rc.fresh_cdk_out(tmp_path) is None  # no cdk.out
    cdk_out = tmp_path / "cdk.out"
    cdk_out.mkdir()
    (cdk_out / "manifest.json").write_text("{}")
    assert rc.fresh_cdk_out(tmp_path) is None  # no dev training stack (another environment's synth)
    (cdk_out / "gpu-dev-training.template.json").write_text("{}")
    assert rc.fresh_cdk_out(tmp_path) == cdk_out
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "edited.py").write_text("")
    later = (cdk_out / "manifest.json").stat().st_mtime + 5
    os.utime(tmp_path / "stacks" / "edited.py", (later, later))
    assert rc.fresh_cdk_out(tmp_path) is None  # the code is newer than the synth


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=60)


def test_scratch_copy_holds_the_working_tree_not_what_readers_made(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name, text in {"app.py": "v1", "pkg/mod.py": "m", "pkg/gone.py": "g", ".gitignore": "cdk.out/\n"}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    (repo / "app.py").write_text("v2, not committed")
    (repo / "pkg" / "gone.py").unlink()
    (repo / "pkg" / "new.py").write_text("a new module")  # untracked, in a folder with tracked files: copied
    (repo / "sample.json").write_text("{}")  # untracked at the top: not copied
    (repo / "shards").mkdir()
    (repo / "shards" / "index.json").write_text("{}")  # an untracked folder: not copied
    (repo / "cdk.out").mkdir()
    (repo / "cdk.out" / "manifest.json").write_text("{}")  # ignored: not copied
    os.utime(repo / "pkg" / "mod.py", (1_000_000_000, 1_000_000_000))
    rc.copy_worktree(repo, tmp_path / "copy")
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert copied == [".gitignore", "app.py", "pkg/mod.py", "pkg/new.py"]
    assert (tmp_path / "copy" / "app.py").read_text() == "v2, not committed"
    assert (tmp_path / "copy" / "pkg" / "mod.py").stat().st_mtime == 1_000_000_000  # make compares these


def test_stale_setup_is_refused_before_make_runs_in_a_copy(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(
        ".venv/.installed: requirements.txt\n\ttouch $@\nnode_modules/.installed: package.json\n\ttouch $@\n"
    )
    for name in ("requirements.txt", "package.json", ".venv/.installed", "node_modules/.installed"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    os.utime(tmp_path / "requirements.txt", (1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "package.json", (1_000_000_000, 1_000_000_000))
    assert rc._stale_setup(tmp_path) == ""
    os.utime(tmp_path / ".venv" / ".installed", (999_999_999, 999_999_999))  # older than requirements.txt
    assert "run `make setup` first" in rc._stale_setup(tmp_path)
    assert (tmp_path / ".venv" / ".installed").stat().st_mtime == 999_999_999  # make -q remade nothing
