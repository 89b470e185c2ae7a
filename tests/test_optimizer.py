"""securevfl.training.optimizer.adam: torch's Adam, the same parameters, without torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import torch

from securevfl.training.optimizer import adam


def test_adam_steps_exactly_as_torchs_and_its_state_round_trips():
    torch.manual_seed(0)
    ours, ref = torch.nn.Linear(5, 3), torch.nn.Linear(5, 3)
    ref.load_state_dict(ours.state_dict())
    o_ours = adam(ours.parameters(), 0.05, weight_decay=1e-3)
    o_ref = torch.optim.Adam(ref.parameters(), lr=0.05, weight_decay=1e-3)
    x = torch.randn(16, 5)
    for _ in range(7):
        for net, opt in ((ours, o_ours), (ref, o_ref)):
            opt.zero_grad()
            (net(x) ** 2).sum().backward()
            opt.step()
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters(), strict=True))
    again = adam(ours.parameters(), 0.05, weight_decay=1e-3)
    again.load_state_dict(o_ours.state_dict())
    assert torch.equal(
        again.state_dict()["state"][0]["exp_avg"], o_ref.state_dict()["state"][0]["exp_avg"]
    )
    assert all(p.grad is not None for p in ours.parameters())


def test_training_with_it_does_not_import_torch_dynamo():
    code = (
        "import sys, torch\n"
        "from securevfl.training.optimizer import adam\n"
        "net = torch.nn.Linear(3, 1); opt = adam(net.parameters(), 0.1)\n"
        "opt.zero_grad(); net(torch.ones(2, 3)).sum().backward(); opt.step()\n"
        "opt.load_state_dict(opt.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
