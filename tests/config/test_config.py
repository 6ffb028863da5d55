"""Config loading: the two real files parse, and every kind of bad value fails with file, key, value, allowed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from stacks.config import CONFIG_DIR, ConfigError, EnvConfig, load_config, parse_config

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def write(tmp_path: Path, data: dict, name: str = "dev") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def load_modified(tmp_path: Path, **changes) -> EnvConfig:
    data = yaml.safe_load(yaml.safe_dump(DEV))
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node[part]
        node[leaf] = value
    write(tmp_path, data)
    return load_config("dev", config_dir=tmp_path)


def test_dev_and_prod_load() -> None:
    dev, prod = load_config("dev"), load_config("prod")
    assert dev.region == "us-east-1" and dev.availability_zones == ("us-east-1a", "us-east-1b")
    assert dev.network.nat_gateways == 0 and dev.removal_policy == "destroy" and dev.account is None
    assert len(prod.availability_zones) == 3
    assert prod.network.nat_gateways == len(prod.availability_zones)  # NAT per AZ
    assert prod.removal_policy == "retain" and prod.termination_protection
    assert prod.network.flow_logs_retention_days > dev.network.flow_logs_retention_days
    assert prod.data.log_retention_days > dev.data.log_retention_days


def test_dev_fleet_mounts_lustre_on_a_dlami_line_that_ships_the_client() -> None:
    """dev has no NAT (nat_gateways: 0): its Lustre-mounting fleet must run a DLAMI line whose release notes
    list the Lustre client (dlami.LUSTRE_CLIENT_PREINSTALLED), or the fleet is refused at synth."""
    dev = load_config("dev")
    (workbench,) = [g for g in dev.fleets.groups if g.name == "workbench"]
    assert workbench.mount_lustre and dev.network.nat_gateways == 0
    image = workbench.dlami_image()
    assert (image.framework, image.pytorch_version, image.os, image.cpu_arch) == (
        "pytorch", "2.12", "ubuntu-24.04", "x86_64"
    )  # fmt: skip
    assert image.lustre_client_install == "preinstalled"
    assert image.ssm_parameter_name == (
        "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.12-ubuntu-24.04/latest/ami-id"
    )


def test_config_is_frozen() -> None:
    cfg = load_config("dev")
    with pytest.raises(Exception, match="frozen"):
        cfg.region = "eu-west-1"  # type: ignore[misc]


def test_unknown_env_names_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match=r"env='staging'.*allowed environments: dev, prod"):
        load_config("staging")


def test_env_name_must_be_a_plain_name() -> None:
    with pytest.raises(ConfigError, match=r"env='../etc'.*allowed: dev, prod"):
        load_config("../etc")


def test_unknown_region(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_modified(tmp_path, region="us-east-7", availability_zones=["us-east-7a"])
    msg = str(err.value)
    assert "dev.yaml" in msg and "region: 'us-east-7'" in msg and "unknown AWS region" in msg
    assert "did you mean" in msg and "us-east-1" in msg


def test_az_outside_region(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"availability_zones: \['eu-west-1a'\] not in region us-east-1"):
        load_modified(tmp_path, availability_zones=["us-east-1a", "eu-west-1a"])


def test_duplicate_azs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"duplicate zone\(s\) \['us-east-1a'\]; list each zone once"):
        load_modified(tmp_path, availability_zones=["us-east-1a", "us-east-1a"])


def test_overlapping_cidr(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"vpc_cidr 10.20.0.0/16 overlaps reserved_cidrs entry 10.0.0.0/8"):
        load_modified(tmp_path, network__reserved_cidrs=["192.168.0.0/16", "10.0.0.0/8"])


def test_too_small_cidr(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"network.vpc_cidr: '10.20.0.0/26'.*between /16 and /24"):
        load_modified(tmp_path, network__vpc_cidr="10.20.0.0/26")


def test_cidr_too_small_for_subnets(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"network.vpc_cidr: 10.20.0.0/24 is too small for 6 subnets of /25.*holds 2"):
        load_modified(tmp_path, network__vpc_cidr="10.20.0.0/24", network__subnet_cidr_mask=25)


def test_subnet_mask_not_longer_than_vpc(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"subnet_cidr_mask /24 must be longer than the VPC prefix /24"):
        load_modified(tmp_path, network__vpc_cidr="10.20.0.0/24", network__subnet_cidr_mask=24)


def test_public_cidr_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"network.vpc_cidr: '8.8.0.0/16'.*private \(RFC 1918\)"):
        load_modified(tmp_path, network__vpc_cidr="8.8.0.0/16")


def test_negative_retention(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_modified(tmp_path, data__log_retention_days=-5)
    msg = str(err.value)
    assert "data.log_retention_days: -5" in msg and "retention values [1, 3, 5, 7" in msg


def test_unsupported_retention(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"network.flow_logs_retention_days: 45: must be one of"):
        load_modified(tmp_path, network__flow_logs_retention_days=45)


def test_negative_expiration_days(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.checkpoint_expiration_days: -1: must be a whole number of days"):
        load_modified(tmp_path, data__checkpoint_expiration_days=-1)


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_modified(tmp_path, network__nat_gateway=1)  # typo of nat_gateways
    msg = str(err.value)
    assert "network.nat_gateway: 1: unknown key (typo?)" in msg
    assert "allowed keys here: vpc_cidr, subnet_cidr_mask, nat_gateways" in msg


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"regoin": "us-east-1"},
            r"regoin: 'us-east-1': unknown key \(typo\?\); allowed keys here: env_name",
            id="unknown_top_level_key",
        ),
        pytest.param({"network__nat_gateways": "2"}, r"network.nat_gateways: '2'", id="wrong_type"),
        pytest.param(
            {"network__nat_gateways": 3},
            r"network.nat_gateways: 3 exceeds the 2 configured AZs; allowed: 0..2",
            id="more_nat_gateways_than_azs",
        ),
        pytest.param(
            {"network__interface_endpoints": ["sagemaker"]},
            r"unknown endpoint\(s\) \['sagemaker'\]; allowed: sagemaker_api",
            id="unknown_interface_endpoint",
        ),
        pytest.param({"account": "1234"}, r"account: '1234': must be a 12-digit AWS account id", id="bad_account"),
        pytest.param(
            {"env_name": "prod"},
            r"env_name: 'prod' does not match the file name; allowed: 'dev'",
            id="env_name_must_match_file",
        ),
    ],
)
def test_invalid_value_is_an_error(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_modified(tmp_path, **changes)


def test_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_config("region: [unclosed", tmp_path / "dev.yaml")


def test_bad_config_fails_before_any_construct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build_app must validate config before creating stacks: no Stack constructor runs."""
    import stacks.app_builder as builder
    import stacks.platform_stacks as platform

    bad = yaml.safe_load(yaml.safe_dump(DEV))
    bad["region"] = "mars-north-1"
    write(tmp_path, bad)
    built: list[str] = []
    monkeypatch.setattr(platform, "NetworkStack", lambda *a, **k: built.append("network"))
    monkeypatch.setattr(builder, "load_config", lambda name: load_config(name, config_dir=tmp_path))
    with pytest.raises(ConfigError, match="mars-north-1"):
        builder.build_app("dev", nag=False)
    assert built == []


def test_cli_reports_config_error(tmp_path: Path) -> None:
    """`python app.py -c env=nope` style failure: exit code 2 and a readable message, no traceback."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(root / "app.py")],
        env={"PATH": "/usr/bin:/bin", "CDK_CONTEXT_JSON": '{"env": "nope"}', "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "configuration error: env='nope'" in proc.stderr and "Traceback" not in proc.stderr


# -- the files of one config directory together: no two share a resource_prefix --------------------------------


def _copy_of_dev(**changes: object) -> dict:
    data = yaml.safe_load(yaml.safe_dump(DEV))
    data.update(changes)
    return data


def test_copied_file_with_its_originals_prefix_is_refused(tmp_path: Path) -> None:
    """cp config/dev.yaml config/staging.yaml + a new env_name would synthesize (and deploy over) gpu-dev-*."""
    dev = write(tmp_path, DEV)
    staging = write(tmp_path, _copy_of_dev(env_name="staging"), "staging")
    for env in ("staging", "dev"):  # neither environment of the pair loads
        with pytest.raises(ConfigError) as caught:
            load_config(env, config_dir=tmp_path)
        message = str(caught.value)
        assert f"{dev} and {staging} share resource_prefix: gpu-dev" in message
        assert "stacks gpu-dev-*" in message
        assert message.endswith(f"set resource_prefix: gpu-staging in {staging}")  # only the copy has to change
        assert "env_name is" not in message  # both env_names match their files

    write(tmp_path, _copy_of_dev(env_name="staging", resource_prefix="gpu-staging"), "staging")
    assert load_config("staging", config_dir=tmp_path).resource_prefix == "gpu-staging"
    assert load_config("dev", config_dir=tmp_path).resource_prefix == "gpu-dev"


def test_untouched_copy_is_named_a_copy(tmp_path: Path) -> None:
    dev = write(tmp_path, DEV)
    staging = write(tmp_path, DEV, "staging")  # not even env_name changed
    with pytest.raises(ConfigError) as caught:
        load_config("dev", config_dir=tmp_path)
    first, note = str(caught.value).splitlines()
    assert first.startswith(f"{dev} and {staging} share resource_prefix: gpu-dev")
    assert note == (
        f"  {staging}: env_name is 'dev', not 'staging' (its file name): it looks like a copy of {dev}; "
        f"set env_name: staging in {staging}"
    )


def test_the_default_prefix_is_shared_too(tmp_path: Path) -> None:
    """Two files without resource_prefix both get the default 'gpu'; the first file keeps it."""
    data = _copy_of_dev()
    del data["resource_prefix"]
    write(tmp_path, data)
    prod = write(tmp_path, {**data, "env_name": "prod"}, "prod")
    with pytest.raises(ConfigError, match=rf"share resource_prefix: gpu: .*set resource_prefix: gpu-prod in {prod}$"):
        load_config("dev", config_dir=tmp_path)


def test_a_file_the_loader_cannot_read_is_left_to_its_own_load(tmp_path: Path) -> None:
    write(tmp_path, DEV)
    (tmp_path / "broken.yaml").write_text("region: [unclosed")
    (tmp_path / "notes.yaml").write_text("- a list, not an environment")
    assert load_config("dev", config_dir=tmp_path).env_name == "dev"
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config("broken", config_dir=tmp_path)


def test_env_name_of_another_file_says_copy(tmp_path: Path) -> None:
    """A unique prefix but the original's env_name: the file-name rule names the file it was copied from."""
    dev = write(tmp_path, DEV)
    staging = write(tmp_path, _copy_of_dev(resource_prefix="gpu-staging"), "staging")
    with pytest.raises(ConfigError) as caught:
        load_config("staging", config_dir=tmp_path)
    assert str(caught.value) == (
        f"{staging}: env_name: 'dev' does not match the file name; allowed: 'staging' ({staging} looks like a copy "
        f"of {dev}: set env_name: staging and give it a resource_prefix of its own)"
    )


def test_cli_reports_a_shared_prefix_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """app.py's main() turns the error into one 'configuration error:' message and exit status 2 (make synth)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_app_under_test", Path(__file__).resolve().parents[2] / "app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    write(tmp_path, DEV)
    staging = write(tmp_path, _copy_of_dev(env_name="staging"), "staging")
    monkeypatch.setattr(app, "load_config", lambda name: load_config(name, config_dir=tmp_path))
    monkeypatch.setenv("CDK_CONTEXT_JSON", '{"env": "staging"}')
    assert app.main() == 2
    err = capsys.readouterr().err
    assert err.startswith("configuration error: ") and f"set resource_prefix: gpu-staging in {staging}" in err
    assert "Traceback" not in err


def test_training_readable_inputs_default_to_the_datasets_bucket_and_are_checked(tmp_path: Path) -> None:
    from stacks.config.training import ReadableInputConfig

    assert load_config("dev").training.readable_inputs == (ReadableInputConfig(),)
    key = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    given = [{"bucket": "team-data", "prefix": "corpora/", "kms_key_arn": key}, {"prefix": "shared/"}]
    cfg = load_modified(tmp_path, training__readable_inputs=given)
    assert [(r.bucket_name, r.prefix, r.kms_key_arn) for r in cfg.training.readable()] == [
        ("team-data", "corpora/", key),
        (None, "shared/", None),
    ]
    bad = [
        ({"bucket": "Team_Data"}, "an S3 bucket name"),
        ({"bucket": "team-data", "prefix": "corpora"}, "ending in '/'"),
        ({"bucket": "team-data", "prefix": "../x/"}, "ending in '/'"),
        ({"bucket": "team-data", "kms_key_arn": "alias/mine"}, "a KMS key ARN"),
        ({"kms_key_arn": key}, "kms_key_arn is set for the datasets bucket"),
        ({"bucket": "team-data", "region": "x"}, "region"),
    ]
    for entry, message in bad:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_modified(tmp_path, training__readable_inputs=[entry])
    with pytest.raises(ConfigError, match="each bucket and prefix once"):
        load_modified(tmp_path, training__readable_inputs=[{"prefix": "a/"}, {"prefix": "a/"}])
    with pytest.raises(ConfigError, match=re.escape("channel name='bad name' is not allowed")):
        load_modified(tmp_path, training__channels=["train", "bad name"])
