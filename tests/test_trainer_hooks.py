"""The private Trainer methods train/trainer_hooks.py overrides: fail loudly if upstream changes."""

import inspect

from transformers import Trainer
from trl import GRPOTrainer

from vqa_r1.train.trainer_hooks import (
    AtomicCheckpointMixin,
    EpochOrderSampler,
    EpochOrderSamplerMixin,
)


def test_save_checkpoint_still_takes_model_and_trial():
    params = list(inspect.signature(Trainer._save_checkpoint).parameters)
    assert params == ["self", "model", "trial"], params
    assert "_save_checkpoint" in AtomicCheckpointMixin.__dict__


def test_grpo_trainer_still_builds_its_sampler_in_get_train_sampler():
    params = inspect.signature(GRPOTrainer._get_train_sampler).parameters
    assert list(params)[:2] == ["self", "dataset"], list(params)
    source = inspect.getsource(GRPOTrainer._get_train_sampler)
    assert "RepeatSampler" in source  # the sampler EpochOrderSampler re-seeds per epoch
    assert "_get_train_sampler" in EpochOrderSamplerMixin.__dict__


def test_epoch_order_sampler_gives_each_epoch_the_uninterrupted_order():
    import torch

    class Inner:  # the attributes of TRL's RepeatSampler that the wrapper relies on
        shuffle, seed, num_samples = True, 3, 6

        def __init__(self):
            self.generator = torch.Generator()
            self.generator.manual_seed(self.seed)

        def __len__(self):
            return self.num_samples

        def __iter__(self):
            return iter(torch.randperm(self.num_samples, generator=self.generator).tolist())

    uninterrupted = Inner()
    orders = [list(iter(uninterrupted)) for _ in range(3)]
    for epoch in range(3):  # a fresh process resumed in epoch k replays exactly epoch k's order
        assert list(EpochOrderSampler(Inner(), lambda e=epoch: e)) == orders[epoch]
    assert orders[0] != orders[1]
