"""Issue 15, items 1, 3 and 6 (sampler part): the drafter contract, device-aware sampling (every tensor on
the state's device, one host read per round) and clear errors for mixed devices and dtypes. CPU-testable:
a default device of "meta" catches any tensor made without the state's device, and the host reads are
counted by wrapping torch.Tensor's reading methods."""
import subprocess
import sys

import pytest
import torch

from specdiff.continuous.drafters import ContinuousDrafter, Draft, FreeDrafter
from specdiff.continuous.models import GaussianMixture, Target, gaussian_mixture_2d
from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample, initial_noise
from specdiff.continuous.schedules import rectified_flow_schedule

METHODS = [("sample", "reflection"), ("sample", "decomposition"), ("block", "decomposition")]


def _target(steps=12, churn=0.5):
    return Target(rectified_flow_schedule(steps, churn), gaussian_mixture_2d(), 2)


def _other_model():
    mixture = gaussian_mixture_2d()
    return GaussianMixture(mixture.means * 1.1, torch.full((8,), 0.3), torch.ones(8))


# ----------------------------------------------------------------------------- item 1: the drafter contract


class OldStyleDrafter:  # the pre-issue-15 contract: flags the sampler had to know, and a 5-argument draft
    needs_root_call, reuses_verification = True, False

    def draft(self, schedule, states, steps, frozen_score, draft_noise):
        return states, states


class NoObserve:
    def start(self, initial):
        pass

    def root_rows(self, drafting):
        return drafting

    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        return Draft(states, states)


class NoDraft(ContinuousDrafter):
    pass


@pytest.mark.parametrize("drafter,message", [
    (OldStyleDrafter(), "draft must accept \\(schedule, states, steps, draft_noise, root_denoised, rows\\)"),
    (NoObserve(), "has no method observe"),
    (NoDraft(), "does not implement draft"),
    (42, "unknown drafter"),
])
def test_a_drafter_that_breaks_the_contract_is_refused_at_construction(drafter, message):
    with pytest.raises(ValueError, match="SpeculativeSampler: .*" + message):
        SpeculativeSampler(_target(), drafter)


class WrongShape(ContinuousDrafter):
    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        return Draft(draft_noise[:, :1], draft_noise[:, :1])


class NotADraft(ContinuousDrafter):
    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        return draft_noise, draft_noise


@pytest.mark.parametrize("drafter,message", [(WrongShape(), "returned means \\(4, 1, 2\\), expected \\(4, 3, 2\\)"),
                                             (NotADraft(), "must return a specdiff.continuous.drafters.Draft")])
def test_a_draft_of_the_wrong_kind_is_named(drafter, message):
    sampler = SpeculativeSampler(_target(), drafter, 3)
    with pytest.raises(ValueError, match=message):
        sampler.sample(initial_noise(4, 2, torch.Generator().manual_seed(0)), torch.Generator().manual_seed(1))


def test_the_sampler_never_asks_a_drafter_its_kind():
    """A drafter is only ever called through the contract: no name, no flags."""
    import inspect

    from specdiff.continuous import sampler

    source = inspect.getsource(sampler)
    for word in ("drafter.name", "needs_root_call", "reuses_verification", "FreeDrafter", "FrozenDrafter",
                 "ModelDrafter", "isinstance(drafter"):
        assert word not in source


# ----------------------------------------------------------------------------- item 3: on the state's device


@pytest.mark.parametrize("rows", [1, 12])  # the few-rows host verification, and the tensor path
@pytest.mark.parametrize("drafter", ["free", "frozen", "model"])
@pytest.mark.parametrize("method,residual", METHODS)
def test_every_tensor_follows_the_state_device(rows, drafter, method, residual):
    """With a default device of "meta", any tensor made without the state's device would be a meta tensor
    and fail when it meets the CPU state: the run must give the same samples as without it."""
    target = _target()
    samplers = [SpeculativeSampler(target, _other_model() if drafter == "model" else drafter, 3, method, residual)
                for _ in range(2)]  # built outside (a construction-time table is made on the CPU), first run inside
    noise = initial_noise(rows, 2, torch.Generator().manual_seed(0), torch.float64)
    reference, reference_stats = samplers[0].sample(noise, torch.Generator().manual_seed(1))
    with torch.device("meta"):
        samples, stats = samplers[1].sample(noise, torch.Generator().manual_seed(1))
        ddpm, _ = ddpm_sample(target, noise, torch.Generator().manual_seed(2))
    assert samples.device.type == "cpu" and ddpm.device.type == "cpu"
    assert torch.equal(samples, reference)
    assert torch.equal(stats.rounds, reference_stats.rounds)


READS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts every read of a tensor's values by the host (the methods that would sync a GPU)."""
    count = {"reads": 0}
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, **kwargs):
            count["reads"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return count


@pytest.mark.parametrize("drafter", ["free", "frozen", "model"])
@pytest.mark.parametrize("method,residual", METHODS)
def test_one_host_read_per_round(host_reads, monkeypatch, drafter, method, residual):
    """12 rows advancing unevenly, padding and root calls included, verified by the tensor path only (as
    on a GPU; on the CPU, rounds of <= SCALAR_ROWS rows go to the host path, where reads are no syncs):
    the sampler reads the device once per round and once to stop; DDPM never."""
    monkeypatch.setattr("specdiff.continuous.gaussian.SCALAR_ROWS", 0)
    target = _target(steps=15)
    sampler = SpeculativeSampler(target, _other_model() if drafter == "model" else drafter, 4, method, residual)
    noise = initial_noise(12, 2, torch.Generator().manual_seed(0), torch.float64)
    host_reads["reads"] = 0
    _, stats = sampler.sample(noise, torch.Generator().manual_seed(1))
    reads = host_reads["reads"]
    loops = int(stats.rounds.max())  # every unfinished row takes part in every round
    assert len(set(stats.rounds.tolist())) > 1  # rows finished at different rounds (compaction ran)
    assert reads == loops + 1 == stats.extra["host_reads"]
    host_reads["reads"] = 0
    ddpm_sample(target, noise, torch.Generator().manual_seed(2))
    assert host_reads["reads"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method,residual", METHODS)
def test_cuda_syncs_per_round(method, residual):
    """On a GPU, torch's own sync detector: at most one sync per round, plus one to stop and one for the
    counters (after a first call has put the schedule's tables on the device); DDPM none."""
    import warnings

    device = torch.device("cuda")
    mixture = gaussian_mixture_2d()
    mixture.means, mixture.variances, mixture.log_weights = (
        t.to(device) for t in (mixture.means, mixture.variances, mixture.log_weights))
    target = Target(rectified_flow_schedule(30, 0.5), mixture, 2)
    sampler = SpeculativeSampler(target, "free", 4, method, residual)
    noise = initial_noise(4096, 2, torch.Generator(device).manual_seed(0), torch.float32, device)
    sampler.sample(noise, torch.Generator(device).manual_seed(1))
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _, stats = sampler.sample(noise, torch.Generator(device).manual_seed(1))
            syncs = sum("synchroniz" in str(w.message) for w in caught)
            ddpm_sample(target, noise, torch.Generator(device).manual_seed(2))
            ddpm_syncs = sum("synchroniz" in str(w.message) for w in caught) - syncs
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert syncs <= int(stats.rounds.max()) + 2
    assert ddpm_syncs == 0


def test_device_round_and_host_round_sample_alike_in_a_sampler():
    """One row at a time (the host verification) and 12 rows at once (the tensor one) give the same
    statistics of the number of rounds on the 2-D mixture: both are the same verification."""
    target = _target(steps=20)
    sampler = SpeculativeSampler(target, "free", 4, "block", "decomposition")
    noise = initial_noise(300, 2, torch.Generator().manual_seed(0), torch.float64)
    batched = sampler.sample(noise, torch.Generator().manual_seed(1))[1].rounds.double()
    single = torch.cat([sampler.sample(noise[i:i + 1], torch.Generator().manual_seed(10 + i))[1].rounds
                        for i in range(300)]).double()
    se = ((batched.var() + single.var()) / 300).sqrt()
    assert abs(batched.mean() - single.mean()) < 4 * se


# ----------------------------------------------------------------------------- item 6: mixed devices, dtypes


class ModuleDenoiser(torch.nn.Module):
    """A denoiser that is a torch module: its device is its parameters'."""

    def __init__(self, device):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones((), device=device))
        self.mixture = gaussian_mixture_2d()

    def forward(self, states, steps, schedule):
        return self.mixture(states, steps, schedule) * self.scale


def test_a_model_on_another_device_is_refused_not_copied():
    target = Target(rectified_flow_schedule(10, 0.5), ModuleDenoiser("meta"), 2)
    noise = initial_noise(4, 2, torch.Generator().manual_seed(0))
    for run in (lambda: ddpm_sample(target, noise), lambda: SpeculativeSampler(target).sample(noise)):
        with pytest.raises(ValueError, match="the target model is on meta but the states are on cpu"):
            run()
    with pytest.raises(ValueError, match="the drafter is on meta but the states are on cpu"):
        SpeculativeSampler(_target(), ModuleDenoiser("meta")).sample(noise)


def test_a_generator_on_another_device_is_refused():
    states = torch.zeros(4, 2, device="meta")
    target = Target(rectified_flow_schedule(10, 0.5), gaussian_mixture_2d().to("meta"), 2)  # model and states agree
    with pytest.raises(ValueError, match="the generator is on cpu but the states are on meta"):
        SpeculativeSampler(target).sample(states, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="the generator is on cpu but the states are on meta"):
        ddpm_sample(target, states, torch.Generator().manual_seed(0))


def test_dtype_mismatches_are_named():
    mixture = gaussian_mixture_2d()

    def float64_model(states, steps, schedule):  # ignores the states' dtype
        return mixture(states.double(), steps, schedule)

    target = Target(rectified_flow_schedule(10, 0.5), float64_model, 2)
    noise = initial_noise(4, 2, torch.Generator().manual_seed(0), torch.float32)
    message = "target model returned torch.float64 on cpu for torch.float32 states on cpu"
    with pytest.raises(ValueError, match=message):
        ddpm_sample(target, noise)
    for drafter in ("free", "frozen"):
        with pytest.raises(ValueError, match=message):
            SpeculativeSampler(target, drafter).sample(noise)
    with pytest.raises(ValueError, match="must be floating point, got torch.int64"):
        SpeculativeSampler(_target()).sample(torch.zeros(4, 2, dtype=torch.long))


# ----------------------------------------------------------------------------- item 2: the metric needs no training code


def test_the_frechet_distance_imports_no_training_code():
    code = ("import sys, torch; from specdiff.continuous.metrics import digit_features; "
            "digit_features(torch.zeros(3, 64)); print('specdiff.continuous.train' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_free_drafter_memory_is_per_sampling_call():
    """A drafter object is reused across calls: start() resets what it kept (the same samples twice)."""
    sampler = SpeculativeSampler(_target(), FreeDrafter(), 3, "block", "decomposition")
    noise = initial_noise(10, 2, torch.Generator().manual_seed(0), torch.float64)
    first, _ = sampler.sample(noise, torch.Generator().manual_seed(1))
    second, _ = sampler.sample(noise, torch.Generator().manual_seed(1))
    assert torch.equal(first, second)
