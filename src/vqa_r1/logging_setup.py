"""One logging format for every verb, locally and in SLURM job logs."""

import logging
import os


def setup_logging() -> None:
    level = os.environ.get("VQA_R1_LOG", "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "urllib3", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
