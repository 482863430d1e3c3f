"""A small JAX training loop on simgpu: an MLP trained with jax.grad (and
value_and_grad) and an optax-style optimiser (pure init/update functions
over pytrees, Adam with momentum buffers), the whole step jitted, so XLA
compiles several dependent kernels into one executable and, with its
command buffers on (the default), into CUDA graphs. Kernels compute
nothing on simgpu, so the checks are on what JAX returns (shapes, dtypes,
where arrays live, how many steps ran), not on values.

Prints key=value lines; a failing section prints `<name>=error ...`.

Sections (in the order given on the command line, all by default):
  devices  the default backend and its devices
  grad     jax.grad of a scalar function of a matrix, jitted
  train    STEPS jitted training steps of an MLP with Adam
  linalg   jnp.linalg solve, inv, cholesky, qr, svd and eigh, jitted
           (cuSOLVER, the version JAX's wheels install)
  flags    the XLA flags in effect
  hold     prints holding=1 and waits for a line on stdin (a test reads
           the monitor meanwhile)
"""
import os
import sys

import jax
import jax.numpy as jnp

from sections import report

STEPS = int(os.environ.get("TRAIN_STEPS", "8"))


def devices():
    print(f"devices.backend={jax.default_backend()}", flush=True)
    print(f"devices.count={len(jax.devices())}", flush=True)


def flags():
    print(f"flags.xla_flags={os.environ.get('XLA_FLAGS', '')}", flush=True)


def grad():
    f = jax.jit(jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)))
    w = jnp.ones((128, 64), dtype=jnp.float32)
    x = jnp.ones((32, 128), dtype=jnp.float32)
    g = f(w, x).block_until_ready()
    print(f"grad.shape={g.shape[0]}x{g.shape[1]}", flush=True)
    print(f"grad.device={','.join(str(d) for d in g.devices())}", flush=True)


# An optax-style optimiser: a pair of pure functions over pytrees.
def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}

    def update(grads, state):
        count = state["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
        c = count.astype(jnp.float32)
        updates = jax.tree_util.tree_map(
            lambda m, v: -learning_rate * (m / (1 - b1**c)) / (jnp.sqrt(v / (1 - b2**c)) + eps), mu, nu
        )
        return updates, {"count": count, "mu": mu, "nu": nu}

    return init, update


def apply_updates(params, updates):
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)


def init_mlp(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (n_in, n_out), jnp.float32) * 0.05, "b": jnp.zeros((n_out,), jnp.float32)})
    return params


def mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    logits = mlp(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def train():
    init, update = adam(1e-3)
    params = init_mlp(jax.random.PRNGKey(0), [64, 256, 256, 10])
    opt_state = init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = update(grads, opt_state)
        return apply_updates(params, updates), opt_state, loss

    key = jax.random.PRNGKey(1)
    done = 0
    for _ in range(STEPS):
        key, kx, ky = jax.random.split(key, 3)
        x = jax.random.normal(kx, (128, 64), jnp.float32)
        y = jax.nn.one_hot(jax.random.randint(ky, (128,), 0, 10), 10)
        params, opt_state, loss = step(params, opt_state, x, y)
        loss.block_until_ready()
        done += 1
    print(f"train.steps={done}", flush=True)
    print(f"train.loss_shape={loss.shape}", flush=True)
    print(f"train.loss_dtype={loss.dtype}", flush=True)
    print(f"train.param_shapes={';'.join('x'.join(map(str, l['w'].shape)) for l in params)}", flush=True)
    print(f"train.param_device={','.join(str(d) for d in params[0]['w'].devices())}", flush=True)
    print(f"train.opt_count_dtype={opt_state['count'].dtype}", flush=True)


def linalg():
    n = 32
    a = jnp.sin(jnp.arange(n * n, dtype=jnp.float32).reshape(n, n))
    spd = a @ a.T + n * jnp.eye(n, dtype=jnp.float32)
    calls = {
        "solve": lambda m: jnp.linalg.solve(m, jnp.ones((n, 4), jnp.float32)),
        "inv": jnp.linalg.inv,
        "cholesky": jnp.linalg.cholesky,
        "qr": lambda m: jnp.linalg.qr(m[:, :16]),
        "svd": lambda m: jnp.linalg.svd(m[:, :16], full_matrices=False),
        "eigh": jnp.linalg.eigh,
    }
    for name, call in calls.items():
        out = jax.block_until_ready(jax.jit(call)(spd))
        leaves = jax.tree_util.tree_leaves(out)
        print(f"linalg.{name}={','.join('x'.join(map(str, x.shape)) for x in leaves)}", flush=True)


def hold():
    print("holding=1", flush=True)
    sys.stdin.readline()


SECTIONS = {"devices": devices, "grad": grad, "train": train, "linalg": linalg, "flags": flags, "hold": hold}

for section in sys.argv[1:] or ["devices", "grad", "train", "linalg", "flags"]:
    report(section, SECTIONS[section])
print("done=1", flush=True)
