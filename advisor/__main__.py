"""``python -m advisor``: the same entry point as the ``advisor`` console script."""

from advisor.cli.main import main

if __name__ == "__main__":
    main()
