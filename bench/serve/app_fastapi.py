"""The FastAPI + PyTorch baseline of bench/serve/run.py: POST /predict takes
trainyard's predict body ({"inputs": [[784 numbers], ...]}) and answers
{"outputs": [[probabilities]], "predictions": [labels]}, the model built
from its spec by tools/trainyard_torch.py and the same weights
trainyard imported.

Run as `uvicorn app_fastapi:app --fd N` with BENCH_MODEL_DIR set (the
folder of weights.py) and BENCH_TORCH_THREADS (PyTorch's intra-op threads
per worker). The handler is `async def` and reads the raw body with
json.loads: the quickest way FastAPI offers for a CPU-bound forward pass of
this size (a pydantic model of 50,000 floats or a threadpool hop only add
to it).

GET /_nodelay reports TCP_NODELAY on this worker's connected TCP sockets,
so that run.py can check the option reached the connections uvicorn
accepted.
"""
import json
import os
import socket
import sys

import numpy as np
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import trainyard_torch as tt  # noqa: E402
import weights  # noqa: E402

torch.set_num_threads(int(os.environ.get("BENCH_TORCH_THREADS", "1")))
_meta, _tensors = weights.load(os.environ["BENCH_MODEL_DIR"])
_model, _ = tt.build(_meta["spec"], _meta["input_shape"])
tt.load_state(_model, _tensors)
_model.eval()
_factor = weights.input_factor(_meta)
_classes = _meta.get("classes")
_shape = [-1] + list(_meta["input_shape"])

app = FastAPI()


@app.post("/predict")
async def predict(request: Request):
    body = json.loads(await request.body())
    x = torch.from_numpy(np.asarray(body["inputs"], dtype=np.float32) * _factor)
    with torch.inference_mode():
        y = torch.softmax(_model(x.reshape(_shape)), dim=1)
    idx = y.argmax(dim=1).tolist()
    return JSONResponse({"outputs": y.tolist(),
                         "predictions": [_classes[i] for i in idx] if _classes else idx})


def tcp_nodelay_of_connections():
    """TCP_NODELAY (0 or 1) of each connected TCP socket of this process."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink("/proc/self/fd/" + fd).startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        try:
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
                s.getpeername()  # listening sockets raise here
                out.append(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0)
        except OSError:
            pass
        finally:
            s.close()
    return out


@app.get("/_nodelay")
async def nodelay():
    return Response(json.dumps({"pid": os.getpid(),
                                "nodelay": tcp_nodelay_of_connections()}),
                    media_type="application/json")
