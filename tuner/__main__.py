"""``python -m tuner`` and the ``tuner`` command."""

from tuner import quiet_ctrl_c_while_loading


def main() -> int:
    quiet_ctrl_c_while_loading()
    from tuner.cli import main as cli  # after the handler

    return cli()


if __name__ == "__main__":
    raise SystemExit(main())
