#!/usr/bin/python3
"""A plain PyTorch module to a served trainyard model (issue 30; ctest
label "parity"), the way a user does it:

  1. a module file defines nn.Modules with their own names (fc1, fc2, an
     nn.ReLU; a conv net with batchnorm and pooling whose forward() flattens
     with torch.flatten);
  2. tools/trainyard_torch.py convert, copied alone into a folder (no
     checkout around it), turns each into a trainyard model file: from
     --class and a torch.save'd --state-dict, and from a torch.save'd
     module (--saved);
  3. `trainyard models import NAME FILE` uploads it to a live server;
  4. `trainyard models predict` there gives what the module's own forward()
     gives (softmax applied, preprocessing too), max |diff| <= 1e-5.

And what convert must refuse, exit 1 with no file written: a module that
applies F.relu in forward() (invisible to module walking, caught by the
output check) and a module of a kind trainyard has no layer for (named).

    convert.py path/to/trainyard path/to/trainyard_torch.py
Needs /usr/bin/python3 with torch; fails (never skips) without it.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
try:
    import numpy as np
    import torch
except ImportError as e:
    sys.exit("FAIL: the convert test needs PyTorch and numpy for %s (%s): "
             "install python3-torch and python3-numpy (scripts/setup.sh test "
             "does)" % (sys.executable, e))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roundtrip as rt  # noqa: E402  (the server, compare, TOL)

torch.set_num_threads(1)

NETS = '''
import torch
from torch import nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.fc1 = nn.Linear(4, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 8, 3, stride=2, padding=1, bias=False)
        self.relu2 = nn.LeakyReLU(0.1)
        self.pool2 = nn.AvgPool2d(3, stride=1, padding=1)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 3 * 3, 4)

    def forward(self, x):
        x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
        x = self.pool2(self.relu2(self.conv2(x)))
        return self.fc(self.drop(torch.flatten(x, 1)))


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Odd(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.act = nn.ReLU6()
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
'''


class Run:
    def __init__(self, srv, work, binary, tool):
        self.srv, self.work, self.binary = srv, work, binary
        # The tool alone in a folder of its own: nothing of the checkout
        # (bench/, tests/) is on its path.
        self.tool = os.path.join(work, "tool", "trainyard_torch.py")
        os.makedirs(os.path.dirname(self.tool))
        shutil.copy(tool, self.tool)
        self.env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=work,
                        TRAINYARD_URL=srv.base, TRAINYARD_KEY=srv.key)

    def convert(self, out, *args, want=0):
        p = subprocess.run([sys.executable, self.tool, "convert", os.path.join(self.work, out)]
                           + list(args), cwd=self.work, capture_output=True, text=True,
                           env=self.env)
        if p.returncode != want:
            raise AssertionError("convert %s: exit %d, wanted %d\nstdout: %s\nstderr: %s"
                                 % (out, p.returncode, want, p.stdout, p.stderr))
        return p

    def cli(self, *args):
        p = subprocess.run([self.binary] + list(args), cwd=self.work, capture_output=True,
                           text=True, env=self.env)
        if p.returncode != 0:
            raise AssertionError("trainyard %s: exit %d\nstdout: %s\nstderr: %s"
                                 % (" ".join(args), p.returncode, p.stdout, p.stderr))
        return p.stdout

    def import_and_predict(self, name, path, x):
        out = self.cli("models", "import", name, path)
        if not out.startswith("Imported model mdl_"):
            raise AssertionError("models import printed: %r" % out)
        model_id = out.split()[2]
        inputs = os.path.join(self.work, name + ".json")
        with open(inputs, "w") as f:
            json.dump({"inputs": x.tolist()}, f)
        return json.loads(self.cli("--json", "models", "predict", model_id, inputs))


def module_probs(module, x):
    with torch.no_grad():
        return torch.softmax(module.eval()(torch.from_numpy(x)), dim=1).numpy()


def check_mlp(run, nets, rng):
    """Net from --class and a state dict, standardized inputs."""
    torch.manual_seed(5)
    net = nets.Net()
    with torch.no_grad():  # weights of its own, not the initial ones
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    sd = os.path.join(run.work, "net_sd.pt")
    torch.save(net.state_dict(), sd)
    mean, std = [10.0, -2.0, 0.5, 3.0], [2.0, 0.5, 1.0, 4.0]
    pre = {"kind": "standardize", "mean": mean, "std": std}
    p = run.convert("net.safetensors", "--module-file", "nets.py", "--class", "Net",
                    "--state-dict", sd, "--input-shape", "4", "--task", "classification",
                    "--classes", "a,b,c", "--preprocess", json.dumps(pre))
    for line in ("fc1.weight -> 0.weight", "fc2.bias -> 2.bias", "checked"):
        if line not in p.stdout:
            raise AssertionError("convert's output lacks %r: %s" % (line, p.stdout))
    x = np.array([[rng.uniform(0, 20), rng.uniform(-4, 0), rng.uniform(-1, 2),
                   rng.uniform(-5, 10)] for _ in range(9)], np.float32)
    r = run.import_and_predict("plain-mlp", os.path.join(run.work, "net.safetensors"), x)
    want = module_probs(net, (x - np.float32(mean)) / np.float32(std))
    rt.compare("Net (fc1, ReLU, fc2): imported", r["outputs"], want)
    if r["predictions"] != [["a", "b", "c"][i] for i in want.argmax(1)]:
        raise AssertionError("predictions %s" % r["predictions"])


def check_conv(run, nets, rng):
    """ConvNet torch.save'd whole (--saved), batchnorm statistics of its
    own, pixels scaled."""
    torch.manual_seed(6)
    net = nets.ConvNet()
    with torch.no_grad():
        net.bn1.running_mean.uniform_(-0.5, 0.5)
        net.bn1.running_var.uniform_(0.5, 2.0)
        net.bn1.weight.uniform_(0.5, 1.5)
        net.bn1.bias.uniform_(-0.2, 0.2)
    saved = os.path.join(run.work, "conv.pt")
    torch.save(net, saved)
    p = run.convert("conv.safetensors", "--saved", saved, "--module-file", "nets.py",
                    "--input-shape", "1,12,12", "--task", "classification",
                    "--classes", "nw,ne,sw,se", "--preprocess",
                    json.dumps({"kind": "scale", "factor": 1 / 255}))
    if "bn1.running_var -> 1.running_var" not in p.stdout:
        raise AssertionError("convert's output: %s" % p.stdout)
    x = np.array([[rng.randrange(256) for _ in range(144)] for _ in range(6)], np.float32)
    r = run.import_and_predict("plain-cnn", os.path.join(run.work, "conv.safetensors"), x)
    want = module_probs(net, (x * np.float32(1 / 255)).reshape(6, 1, 12, 12))
    rt.compare("ConvNet (conv, bn, pools, flatten): imported", r["outputs"], want)


def check_refusals(run):
    for cls, needles in (("Functional", ["forward()", "F.relu"]),
                         ("Odd", ["'act' is a ReLU6", "Linear, Conv2d"])):
        out = "%s.safetensors" % cls
        p = run.convert(out, "--module-file", "nets.py", "--class", cls, "--input-shape", "4",
                        "--task", "classification", want=1)
        for n in needles:
            if n not in p.stderr:
                raise AssertionError("convert %s: %r not in %s" % (cls, n, p.stderr))
        if os.path.exists(os.path.join(run.work, out)):
            raise AssertionError("convert %s wrote a file" % cls)
        print("  ok   %-44s refused: %s" % (cls, p.stderr.strip()[:70]))


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    binary, tool = (os.path.abspath(a) for a in argv)
    srv = rt.Server(binary)
    work = tempfile.mkdtemp(prefix="ty-convert-")
    try:
        t0 = time.time()
        with open(os.path.join(work, "nets.py"), "w") as f:
            f.write(NETS)
        sys.path.insert(0, work)
        import nets
        run = Run(srv, work, binary, tool)
        rng = random.Random(13)
        check_mlp(run, nets, rng)
        check_conv(run, nets, rng)
        check_refusals(run)
        print("convert: ok in %.1f s" % (time.time() - t0))
    except AssertionError as e:
        print("FAIL: %s" % e)
        srv.err.seek(0)
        print(srv.err.read()[-3000:])
        return 1
    finally:
        srv.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
