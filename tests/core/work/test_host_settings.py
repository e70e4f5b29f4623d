"""A host's `pass_env` and `cleanup` in `.gen/config.toml`: each bad value is refused with
the file, the host and the fault; each is part of what the config runs, so adding or
changing one waits for `genjob allow`, which shows it; a config allowed before they
existed stays allowed as it is."""

from __future__ import annotations

import pytest
from corekit import cli, set_config

from core.errors import BadInput
from core.store.config import DEFAULT_CONFIG, load_config, read_repository_config, runs_digest, what_runs
from core.store.layout import Layout
from core.store.pins import read_pins

DEMO = 'transport = "local"\ngenerator = "python3 -m core.remote.demo_generator"'


def with_local(setting: str) -> str:
    """The default config whose `local` host has `setting` too."""
    assert DEMO in DEFAULT_CONFIG
    return DEFAULT_CONFIG.replace(DEMO, f"{DEMO}\n{setting}")


@pytest.mark.parametrize(
    ("setting", "fault"),
    [
        ('pass_env = ["*"]', "pass_env: '*' is not a variable name or a glob of one"),
        ('pass_env = ["SLURM JOB"]', "pass_env: 'SLURM JOB' is not a variable name or a glob of one"),
        ('pass_env = ["1ST"]', "pass_env: '1ST' is not a variable name or a glob of one"),
        ('pass_env = ["PATH"]', "pass_env: PATH is set by genjob's runner itself"),
        ('pass_env = ["GENJOB_WORKDIR"]', "pass_env: GENJOB_WORKDIR is set by genjob's runner itself"),
        ('pass_env = "SLURM_*"', "pass_env"),
        (f"pass_env = [{', '.join(f'{chr(34)}V{n}{chr(34)}' for n in range(65))}]", "pass_env"),
        ('cleanup = "scancel {job_id}"', "cleanup: {job_id} is not a fact the runner reports"),
        ('cleanup = ""', "cleanup"),
    ],
)
def test_a_bad_pass_env_or_cleanup_is_refused_naming_the_file_and_host(
    repo: Layout, setting: str, fault: str
) -> None:
    set_config(repo, with_local(setting))
    with pytest.raises(BadInput) as refused:
        load_config(repo.config)
    message = str(refused.value)
    assert message.startswith(f"{repo.config}: ") and "hosts.local" in message and fault in message


@pytest.mark.parametrize(
    "setting",
    [
        'pass_env = ["SLURM_*"]',
        'cleanup = "scancel {slurm_job_id}"',
        'cleanup = "kubectl delete pod {pod_name}"',
    ],
)
def test_adding_a_pass_env_or_cleanup_waits_for_allow(repo: Layout, setting: str) -> None:
    repo.config.write_text(with_local(setting))  # as a pull would write it
    config = load_config(repo.config)
    assert config.held is not None and config.hosts == {}


def test_changing_an_allowed_pass_env_or_cleanup_waits_for_allow(repo: Layout) -> None:
    set_config(repo, with_local('pass_env = ["SLURM_JOB_ID"]\ncleanup = "scancel {slurm_job_id}"'))
    assert load_config(repo.config).held is None
    for changed in (
        'pass_env = ["SLURM_*"]\ncleanup = "scancel {slurm_job_id}"',
        'pass_env = ["SLURM_JOB_ID"]\ncleanup = "scancel --full {slurm_job_id}"',
    ):
        repo.config.write_text(with_local(changed))
        assert load_config(repo.config).held is not None, changed


def test_a_config_allowed_before_them_stays_allowed(repo: Layout) -> None:
    """The consent digest of a host with neither setting is the one it always was."""
    assert read_pins(repo.root).config == runs_digest(read_repository_config(repo.config))
    hosts = what_runs(load_config(repo.config))["hosts"]
    assert hosts and all("pass_env" not in h and "cleanup" not in h for h in hosts.values())


def test_allow_shows_what_the_generator_gets_and_the_cleanup(repo: Layout) -> None:
    repo.config.write_text(with_local('pass_env = ["CUDA_VISIBLE_DEVICES", "SLURM_*"]\ncleanup = "true"'))
    shown = cli("allow", "--show", root=repo.root).stdout
    assert "the generator also gets, from genjob's environment here: CUDA_VISIBLE_DEVICES, SLURM_*" in shown
    assert "cleanup, run ON THIS MACHINE when a run's worker died: true" in shown
