"""The deployment pages say what a user on another machine needs: docker.md's user steps name no path of a
developer's machine and no CI internals (those sit in its contributors' section), link real pages, and pin
the torch the image installs; scaling-out.md lists the ports nodes open to each other, with ``ray start``
flags that exist, and says that Ray, Python and lnserve versions must match on every node."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DOCKER = (DOCS / "docker.md").read_text(encoding="utf-8")
SCALING = (DOCS / "scaling-out.md").read_text(encoding="utf-8")
CONTRIBUTORS = "## For contributors"
# absolute paths a user step may name: the standard places on a Debian host, and the image's own folders
STANDARD_PATHS = ("/var/tmp/rootfs", "/var/log/", "/etc/ssl/certs/", "/pip/", "/models", "/data", "/dev/null")


def _user_part() -> str:
    assert CONTRIBUTORS in DOCKER
    return DOCKER[: DOCKER.index(CONTRIBUTORS)]


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.S | re.M)


def test_docker_user_steps_name_no_path_of_a_developer_machine() -> None:
    blocks = _bash_blocks(_user_part())
    assert blocks
    for block in blocks:
        for path in re.findall(r"(?<![\w.:/~-])(/[\w.+*-]+(?:/[\w.+*-]+)*)", block):
            assert path.startswith(STANDARD_PATHS), f"{path} exists only on some machine:\n{block}"


def test_docker_user_steps_leave_ci_internals_to_the_contributors_section() -> None:
    user = _user_part()
    for internal in (".ci/", "tests/", "CI ", "/opt/wheels"):
        assert internal not in user, internal
    assert ".ci/" in DOCKER[DOCKER.index(CONTRIBUTORS) :]  # said once, where contributors look


def test_no_page_points_at_a_readme_section_that_is_not_a_link() -> None:
    """docker.md sent users to (README, "Settings"), a section the README does not have."""
    for page in DOCS.glob("*.md"):
        assert not re.search(r"README, \"", page.read_text(encoding="utf-8")), page.name


def test_the_torch_wheel_docker_md_downloads_is_the_one_pyproject_pins() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    pinned = [d for d in deps if re.match(r"torch\b", d)]
    wanted = re.findall(r"pip download (torch\S*)", DOCKER)
    if not pinned:  # torch is an extra: the image does not install it, the page must not fetch it
        assert not wanted
        return
    assert wanted == [pinned[0].replace(" ", "")]


def test_scaling_out_lists_the_ports_between_nodes_and_the_flags_that_fix_them() -> None:
    section = SCALING[SCALING.index("## Ports between nodes") :]
    section = section[: section.index("\n## ", 4)]
    assert "6379" in section and "--port" in section
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    flags = set(re.findall(r"`(?:ray start --head )?(--[a-z-]+)", table))
    assert {"--node-manager-port", "--object-manager-port", "--min-worker-port", "--max-worker-port"} <= flags
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        pytest.skip("ray is not installed (the ray extra): the flags are not checked against ray start")
    helptext = subprocess.run([ray, "start", "--help"], capture_output=True, text=True, timeout=120).stdout
    missing = [f for f in flags if f not in helptext and f != "--include-dashboard"]
    assert not missing, f"ray start has no {missing}"


def test_scaling_out_says_versions_must_match_on_every_node() -> None:
    section = SCALING[SCALING.index("## Versions must match on every node") :]
    section = section[: section.index("\n## ", 4)]
    for what in ("**Ray**", "**Python**", "**lnserve**"):
        assert what in section, what
