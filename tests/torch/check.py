"""PyTorch through fairgpu: each check computes on the (virtual) GPU and
compares with the same computation on the CPU. Prints one line per check
(PASS/FAIL name) and exits 1 if any failed, 0 if all passed.

PyTorch's CUDA wheels carry SASS for real GPUs (and little PTX), so this
check is meant for a host whose daemon runs the CUDA executor; on SimGpu
the first kernel launch fails with SimGpu's "no PTX" error.
Usage: python3 check.py [NAME ...]   (default: every check)
"""
import sys
import traceback

import torch

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def close(got, want, rtol=1e-5, atol=1e-6):
    got = got.detach().cpu()
    want = want.detach().cpu()
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    assert torch.allclose(got, want, rtol=rtol, atol=atol), (
        f"max abs error {(got.double() - want.double()).abs().max().item()}"
    )


gen = torch.Generator().manual_seed(1234)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen, dtype=dtype)


@check
def creation():
    dev = torch.device("cuda")
    assert torch.equal(torch.zeros(3, 5, device=dev).cpu(), torch.zeros(3, 5))
    assert torch.equal(torch.ones(1000, device=dev).cpu(), torch.ones(1000))
    assert torch.equal(torch.arange(10007, device=dev).cpu(), torch.arange(10007))
    assert torch.equal(torch.full((7,), 3, dtype=torch.int64, device=dev).cpu(), torch.full((7,), 3))
    a = randn(123, 77)
    assert torch.equal(a.cuda().cpu(), a)
    assert torch.equal(a.cuda().t().contiguous().cpu(), a.t().contiguous())


@check
def elementwise_and_reductions():
    a = randn(1000, 300)
    b = randn(1000, 300)
    g, h = a.cuda(), b.cuda()
    close(g * h + 2.0, a * b + 2.0)
    close(torch.sin(g) + torch.exp(h / 10), torch.sin(a) + torch.exp(b / 10), rtol=1e-5, atol=1e-5)
    close(g.sum(), a.sum(), rtol=1e-4, atol=1e-3)
    close(g.sum(dim=0), a.sum(dim=0), rtol=1e-4, atol=1e-4)
    close(g.amax(dim=1), a.amax(dim=1))
    assert torch.equal(g.argmax(dim=1).cpu(), a.argmax(dim=1))
    close(torch.cumsum(g[:, 0], 0), torch.cumsum(a[:, 0], 0), rtol=1e-4, atol=1e-3)
    s, _ = torch.sort(g[0])
    assert torch.equal(s.cpu(), torch.sort(a[0])[0])


@check
def matmul():
    # cuBLAS: cublasCreate, its occupancy queries, its kernels.
    a = randn(257, 129, dtype=torch.float64)
    b = randn(129, 65, dtype=torch.float64)
    close(a.cuda() @ b.cuda(), a @ b, rtol=1e-10, atol=1e-10)
    x = randn(512, 384)
    y = randn(384, 256)
    torch.backends.cuda.matmul.allow_tf32 = False
    close(x.cuda() @ y.cuda(), x @ y, rtol=1e-4, atol=1e-4)
    h = (x.cuda().half() @ y.cuda().half()).float()
    close(h, x.half().float() @ y.half().float(), rtol=2e-2, atol=2e-1)


@check
def training_loop():
    # A small MLP trained on a fixed regression problem, on the GPU and on
    # the CPU from the same initial weights: the losses agree step by step.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    x = randn(256, 16)
    w_true = randn(16, 1)
    y = torch.tanh(x @ w_true) + 0.01 * randn(256, 1)

    def model():
        torch.manual_seed(7)
        return torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )

    losses = {}
    for dev in ("cpu", "cuda"):
        m = model().to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        xd, yd = x.to(dev), y.to(dev)
        out = []
        for _ in range(50):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(xd), yd)
            loss.backward()
            opt.step()
            out.append(loss.item())
        losses[dev] = out
    assert losses["cuda"][-1] < 0.5 * losses["cuda"][0], f"did not learn: {losses['cuda'][::10]}"
    for i, (c, g) in enumerate(zip(losses["cpu"], losses["cuda"])):
        assert abs(c - g) <= 1e-4 * max(1.0, abs(c)), f"step {i}: cpu {c} cuda {g}"


@check
def streams_and_events():
    s = torch.cuda.Stream()
    a = randn(1 << 20)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        start.record()
        g = a.cuda(non_blocking=True) * 3
        end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    close(g, a * 3)


def main(argv):
    wanted = set(argv)
    failed = 0
    for fn in CHECKS:
        if wanted and fn.__name__ not in wanted:
            continue
        try:
            fn()
            print(f"PASS {fn.__name__}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
