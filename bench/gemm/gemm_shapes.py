"""bf16 GEMM throughput vs transformer-layer shape (optsearch issue 15). Writes CSV + JSON to $OUT.

Run on the GPU to measure (needs PyTorch with CUDA): `OUT=results python bench/gemm/gemm_shapes.py`.
The results of 2026-11-23 on one H100 SXM are gemm_shapes.csv and meta.json beside this file;
docs/cost-model.md, section 14, gives the fit the cost model uses.
"""
import json, os, subprocess, time
import torch

out = os.environ.get("OUT", ".")
dev = torch.device("cuda")
props = torch.cuda.get_device_properties(0)
free, total = torch.cuda.mem_get_info()
meta = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
        "total_memory_bytes": props.total_memory, "mem_get_info_free": free, "mem_get_info_total": total,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
try:
    query = "--query-gpu=name,memory.total,memory.used,power.limit,clocks.max.sm"
    meta["nvidia_smi"] = subprocess.run(["nvidia-smi", query, "--format=csv"], capture_output=True, text=True).stdout
except Exception as e:
    meta["nvidia_smi"] = str(e)

def bench(m, n, k, iters=20):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.matmul(a, b)
    end.record(); torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters

rows = []
# big square for the sustained rate
for sq in (4096, 8192, 16384):
    t = bench(sq, sq, sq, 10)
    rows.append(dict(kind="square", h=sq, tp=1, tokens=sq, gemm="square", m=sq, n=sq, k=sq, s=t, tflops=2*sq**3/t/1e12))
for tokens in (2048, 8192):
    for h in (1024, 1600, 2048, 2560, 4096, 6144, 8192, 12288):
        for tp in (1, 2, 4, 8):
            if h % tp or (4*h) % tp: continue
            # forward GEMMs of a GPT layer on one tp rank: (name, M, N, K)
            fwd = [("qkv", tokens, 3 * h // tp, h), ("proj", tokens, h, h // tp),
                   ("fc1", tokens, 4 * h // tp, h), ("fc2", tokens, h, 4 * h // tp)]
            tot_f, tot_t = 0.0, 0.0
            for name, M, N, K in fwd:
                for phase, (mm, nn, kk) in (("fwd", (M, N, K)), ("dgrad", (M, K, N)), ("wgrad", (K, N, M))):
                    t = bench(mm, nn, kk)
                    f = 2.0*mm*nn*kk
                    tot_f += f; tot_t += t
                    rows.append(dict(kind="gemm", h=h, tp=tp, tokens=tokens, gemm=f"{name}.{phase}",
                                     m=mm, n=nn, k=kk, s=t, tflops=f / t / 1e12))
            rows.append(dict(kind="layer", h=h, tp=tp, tokens=tokens, gemm="layer_linear_fwd_bwd",
                             m=tokens, n=0, k=0, s=tot_t, tflops=tot_f / tot_t / 1e12))
            print(f"h={h} tp={tp} tokens={tokens} layer GEMMs {tot_f / tot_t / 1e12:.1f} TFLOP/s "
                  f"({tot_f / 1e9:.1f} GFLOP)", flush=True)
with open(os.path.join(out, "gemm_shapes.csv"), "w") as fh:
    keys = list(rows[0])
    fh.write(",".join(keys) + "\n")
    for r in rows:
        fh.write(",".join(str(r[k]) for k in keys) + "\n")
with open(os.path.join(out, "meta.json"), "w") as fh:
    json.dump(meta, fh, indent=1)
print(json.dumps(meta, indent=1))
for r in rows[:3]: print(r)
