"""Typed configuration: TOML plus KERNELZERO_* variables, with errors that name the bad key."""

import pytest

from kernelzero.config import ConfigError, dump_config, load_config


def test_defaults_validate_and_round_trip_through_toml(tmp_path):
    config = load_config(env={})
    path = tmp_path / "kz.toml"
    path.write_text(dump_config(config))
    assert load_config(path, env={}) == config


def test_toml_then_environment_overrides(tmp_path):
    path = tmp_path / "kz.toml"
    path.write_text('[evaluator]\ntimeout_s = 30\n[log]\nurl = "embedded:/tmp/a.sqlite"\n')
    config = load_config(path, env={"KERNELZERO_EVALUATOR_TIMEOUT_S": "45.5", "KERNELZERO_CODER_TARGET": "cuda"})
    assert config.evaluator.timeout_s == 45.5
    assert config.coder.target == "cuda"
    assert config.log.url == "embedded:/tmp/a.sqlite"


@pytest.mark.parametrize(
    "toml, env, names",
    [
        ("[evaluator]\ntimeout_s = 'soon'\n", {}, ["evaluator.timeout_s", "kz.toml"]),
        ("[coder]\ntemprature = 0.7\n", {}, ["coder.temprature"]),
        ("[nonsense]\nx = 1\n", {}, ["nonsense"]),
        ("", {"KERNELZERO_TRAINER_TAU": "high"}, ["trainer.tau", "KERNELZERO_TRAINER_TAU"]),
        ("", {"KERNELZERO_TRAINER_TAUU": "0.5"}, ["KERNELZERO_TRAINER_TAUU", "tauu"]),
        ("", {"KERNELZERO_NOPE_X": "1"}, ["KERNELZERO_NOPE_X"]),
        ("[coder]\ntarget = 'opencl'\n", {}, ["coder.target"]),
        ("", {"KERNELZERO_EVALUATOR_GPU_MEMORY_FRACTION": "1.5"}, ["evaluator", "gpu_memory_fraction"]),
        ("[evaluator]\nworkers_per_gpu = -1\n", {}, ["evaluator", "workers_per_gpu"]),
        ("[log\n", {}, ["not valid TOML"]),
    ],
)
def test_errors_name_the_bad_key_and_its_source(tmp_path, toml, env, names):
    path = tmp_path / "kz.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    for name in names:
        assert name in str(info.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", env={})


@pytest.mark.parametrize(
    "env, key",
    [
        ({"KERNELZERO_CODER_TEMPERATURE": "0"}, "coder.temperature"),
        ({"KERNELZERO_CODER_TEMPERATURE": "-1"}, "coder.temperature"),
        ({"KERNELZERO_PROPOSER_TEMPERATURE": "0"}, "proposer.temperature"),
        ({"KERNELZERO_CODER_TOP_P": "0"}, "coder.top_p"),
        ({"KERNELZERO_CODER_GROUP_SIZE": "0"}, "coder.group_size"),
        ({"KERNELZERO_TRAINER_LEARNING_RATE": "-1e-5"}, "trainer.learning_rate"),
        ({"KERNELZERO_TRAINER_TAU": "1.5"}, "trainer.tau"),
        ({"KERNELZERO_TRAINER_GROUPS_PER_STEP": "0"}, "trainer.groups_per_step"),
        ({"KERNELZERO_TRAINER_SPEEDUP_TOLERANCE": "-0.1"}, "trainer.speedup_tolerance"),
        ({"KERNELZERO_TRAINER_CODER_STEPS": "0", "KERNELZERO_TRAINER_PROPOSER_STEPS": "0"}, "trainer.coder_steps"),
        ({"KERNELZERO_ANALYTICS_BAND_LOW": "0.8"}, "analytics.band_low"),
        ({"KERNELZERO_ANALYTICS_BAND_LOW": "0.6", "KERNELZERO_ANALYTICS_BAND_HIGH": "0.4"}, "analytics.band_low"),
    ],
)
def test_values_that_would_silently_break_training_are_refused_naming_the_key(env, key):
    with pytest.raises(ConfigError) as info:
        load_config(env=env)
    message = str(info.value)
    assert message.startswith(f"config key {key} (KERNELZERO_") and "must be" in message
