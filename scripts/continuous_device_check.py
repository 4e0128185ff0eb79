"""gaussian_verify on an accelerator: exactness at n = 2,000,000 rows in one call, and the time of one
round at real batch sizes, side by side with the host CPU. Prints JSON. Needs torch, numpy, scipy.

    python scripts/continuous_device_check.py --device cuda > device_check.json

Exactness (gamma = 1, the tests' one-step case, test_gaussian.py): the state of step 1 must be the
target step N(m^q, sigma^2 Id) whatever the method; KS p-values of its coordinates 0 (along Delta) and
1 (across), and the measured acceptance against the closed form of Appendix A.2 (z in standard errors).
Timing: one round of gamma = 7 for b rows in d dimensions (d = 64: the digits; d = 12,288: a
3 x 64 x 64 image), median of 10 after 3 warm-ups, synchronised.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
from scipy import stats

from specdiff.continuous.gaussian import acceptance_probability, gaussian_verify

METHODS = {"R": ("sample", "reflection"), "D": ("sample", "decomposition"), "B": ("block", "decomposition")}


def exactness(device: str, n: int = 2_000_000, d: int = 8, delta_norm: float = 1.2) -> dict:
    out = {}
    for name, (method, residual) in METHODS.items():
        g = torch.Generator(device=device).manual_seed(4)
        sigma = torch.tensor([0.5, 0.5], dtype=torch.float64, device=device)
        target_mean = torch.linspace(-1, 1, d, dtype=torch.float64, device=device)
        delta = torch.zeros(d, dtype=torch.float64, device=device)
        delta[0] = delta_norm
        draft_mean = target_mean + sigma[0] * delta
        z = torch.randn(n, 1, d, generator=g, dtype=torch.float64, device=device)
        target_means = torch.stack([target_mean, target_mean + 3.0]).expand(n, 2, d)
        result = gaussian_verify(z, draft_mean.expand(n, 1, d), target_means, sigma, method=method, residual=residual,
                                 generator=g)
        accepted = (result.num_accepted == 1).unsqueeze(-1)
        step_one = torch.where(accepted, delta + z[:, 0], (result.next_state - target_mean) / sigma[0]).cpu()
        measured = accepted.double().mean().item()
        expected = acceptance_probability(delta_norm).item()
        out[name] = {
            "ks_p_along_delta": stats.kstest(step_one[:, 0].numpy(), "norm").pvalue,
            "ks_p_across": stats.kstest(step_one[:, 1].numpy(), "norm").pvalue,
            "acceptance": measured,
            "acceptance_closed_form": expected,
            "acceptance_z": (measured - expected) / math.sqrt(expected * (1 - expected) / n),
        }
    return out


def round_seconds(device: str, rows: int, dim: int, method: str, residual: str, gamma: int = 7) -> float:
    g = torch.Generator(device=device).manual_seed(0)
    target_means = torch.randn(rows, gamma + 1, dim, generator=g, device=device)
    draft_means = target_means[:, :gamma] + 0.3 / math.sqrt(dim) * torch.randn(rows, gamma, dim, generator=g, device=device)
    noise = torch.randn(rows, gamma, dim, generator=g, device=device)
    sigma = torch.full((gamma + 1,), 0.2, device=device)
    times = []
    for repeat in range(13):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        gaussian_verify(noise, draft_means, target_means, sigma, method=method, residual=residual, generator=g)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if repeat >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 256, 4096, 65536])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 12288])
    args = parser.parse_args()
    report = {"device": args.device, "torch": torch.__version__,
              "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
              "exactness_gamma1_n2e6": exactness(args.device), "round_ms": []}
    for dim in args.dims:
        for rows in args.rows:
            if rows * dim > 65536 * 12288 // 4 and dim > 64:  # keep the host copy under ~1 GB
                continue
            for name, (method, residual) in METHODS.items():
                entry = {"rows": rows, "dim": dim, "method": name}
                for device in (args.device, "cpu"):
                    if device == "cpu" and rows * dim > 4096 * 12288:
                        continue
                    entry[f"{device}_ms"] = 1e3 * round_seconds(device, rows, dim, method, residual)
                report["round_ms"].append(entry)
                print(json.dumps(entry), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
