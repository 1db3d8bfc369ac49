"""`vqa-r1 sft`."""

from vqa_r1.train.cli import make_verb

add_arguments, run = make_verb("sft")
