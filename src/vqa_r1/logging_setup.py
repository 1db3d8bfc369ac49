"""One logging format for every verb, locally and in SLURM job logs."""

import logging
import os
import sys


def setup_logging() -> None:
    level = os.environ.get("VQA_R1_LOG", "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "urllib3", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not sys.stderr.isatty():
        no_bars()


def no_bars() -> None:
    """Off a terminal (a SLURM job log, a file), the libraries' tqdm bars (weights loading, dataset
    maps) are carriage returns and half-drawn lines: off. Their env switches, read at import,
    and their functions, for a library imported already."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
