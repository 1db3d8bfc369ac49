"""The private Trainer methods train/trainer_hooks.py overrides: fail loudly if upstream changes."""

import inspect

from transformers import Trainer
from trl import GRPOTrainer

from vqa_r1.train.trainer_hooks import (
    AtomicCheckpointMixin,
    EpochOrderSampler,
    EpochOrderSamplerMixin,
    GenerationBufferMixin,
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


def test_save_checkpoint_still_writes_per_rank_files_without_a_barrier_of_its_own():
    """What AtomicCheckpointMixin's barriers are for: every rank writes into the checkpoint (its
    RNG state), the save starts with a collective (store_flos) and has no barrier of its own
    (only one for ``best_global_step``, unused here)."""
    rng = inspect.getsource(Trainer._save_rng_state)
    assert 'f"rng_state_{self.args.process_index}.pth"' in rng
    save = inspect.getsource(Trainer._save_checkpoint)
    assert "self.store_flos()" in save and "self._save_rng_state(output_dir)" in save
    assert save.count("dist.barrier()") <= 1 and "best_global_step" in save
    load = inspect.getsource(Trainer._load_rng_state)
    assert 'f"rng_state_{process_index}.pth"' in load


def test_accelerate_still_picks_mpi_on_cpu_unless_told_gloo():
    """Why train/runner.py passes ddp_backend="gloo" on CPU: accelerate's choice for several CPU
    processes is MPI whenever torch has it."""
    from accelerate.state import PartialState

    source = inspect.getsource(PartialState._prepare_backend)
    assert 'backend in (None, "mpi") and torch.distributed.is_mpi_available()' in source


def test_grpo_still_buffers_generations_by_step_and_loads_state_on_resume():
    """GenerationBufferMixin saves ``_step`` and ``_buffered_inputs`` and restores them in
    ``_load_optimizer_and_scheduler``: TRL must still keep them under these names and the
    Trainer must still call that method on every resume (DeepSpeed included)."""
    prepare = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._buffered_inputs" in prepare and "self._step %" in prepare
    loop = inspect.getsource(Trainer._prepare_for_training)
    assert "self._load_optimizer_and_scheduler(resume_from_checkpoint)" in loop
    assert {"_save_checkpoint", "_load_optimizer_and_scheduler"} <= set(
        GenerationBufferMixin.__dict__
    )


def test_grpo_still_makes_a_generation_batch_in_one_method_with_gathered_rewards():
    """DynamicSamplingMixin replaces rows of ``_generate_and_score_completions``' result and reads
    the rewards ``_calculate_rewards`` returns: gathered over ranks, one row per completion."""
    generate = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "self._calculate_rewards(" in generate and '"num_items_in_batch"' in generate
    rewards = inspect.getsource(GRPOTrainer._calculate_rewards)
    assert "gather(rewards_per_func)" in rewards
    prepare = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._generate_and_score_completions(generation_batch)" in prepare
    assert "split_pixel_values_by_grid(generation_batch)" in prepare
