"""``python -m swerl.cli`` (and ``torchrun -m swerl.cli``): the ``swerl`` command."""

from swerl.cli import main

if __name__ == "__main__":
    main()
