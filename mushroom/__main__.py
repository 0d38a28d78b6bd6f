"""`python -m mushroom` and the `mushroom` command.

The command line's modules take a moment to import; a Ctrl-C then came before the CLI's
error boundary and printed a traceback. Here it is one line and exit 130, as later.
"""

import sys


def main() -> None:
    """Imports the command line and runs it."""
    try:
        from mushroom.cli.app import main as run
    except (KeyboardInterrupt, ImportError) as exc:
        # a Ctrl-C inside a compiled module's import comes out as an ImportError
        from mushroom.errors import cut_by_ctrl_c  # a plain module: no third-party import

        if not cut_by_ctrl_c(exc):
            raise
        sys.stderr.write("interrupted while starting: nothing was done\n")
        raise SystemExit(130) from None
    run()


if __name__ == "__main__":
    main()
