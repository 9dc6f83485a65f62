"""`kernelzero config`: print the effective configuration as TOML; validates it on the way."""

from kernelzero.config import Config, dump_config


def add_arguments(parser) -> None:
    pass


def main(args, config: Config) -> int:
    print(dump_config(config), end="")
    return 0
