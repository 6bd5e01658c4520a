"""The end of `make demo` (scripts/demo.sh): compares the run through
zerostate with the reference run by torch.optim.AdamW, and draws both loss
curves as an SVG.

  demo_report.py ZS_LOSS.json REF_LOSS.json ZS_WEIGHTS.pt REF_WEIGHTS.pt OUT.svg

The loss logs are examples/gpt/train.py's --loss_log (rank 0's loss per
step), the weights its --save_weights. Exits 1 when the loss did not fall
to under 0.8 of its first value, or when the runs' weights are more than
1e-3 apart (the relative L2 norm of all the weights' difference; the sums
of fp32 gradients run in another order on the two paths, and after 80
steps the demo's weights are about 2e-5 apart)."""

import json
import sys

import torch

WIDTH, HEIGHT, MARGIN = 640, 360, 48


def distance(a, b):
    """||a - b|| / ||b|| over all the weights as one vector, and the largest
    elementwise |a - b|."""
    diff = torch.cat([(a[k].double() - v.double()).flatten() for k, v in b.items()])
    ref = torch.cat([v.double().flatten() for v in b.values()])
    return float(diff.norm() / ref.norm()), float(diff.abs().max())


def polyline(steps, losses, top, colour):
    x0, x1 = steps[0], max(steps[-1], steps[0] + 1)
    points = " ".join(
        f"{MARGIN + (s - x0) / (x1 - x0) * (WIDTH - 2 * MARGIN):.1f},"
        f"{HEIGHT - MARGIN - l / top * (HEIGHT - 2 * MARGIN):.1f}"
        for s, l in zip(steps, losses))
    return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'


def svg(zs, ref):
    top = max(max(zs["loss"]), max(ref["loss"])) * 1.05
    last = zs["steps"][-1]
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" '
        f'y2="{HEIGHT - MARGIN}" stroke="black"/>',
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
        f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 16}">step {zs["steps"][0]}</text>',
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" text-anchor="end">'
        f'step {last}</text>',
        f'<text x="{MARGIN - 4}" y="{MARGIN}" text-anchor="end">{top:.2f}</text>',
        f'<text x="{MARGIN - 4}" y="{HEIGHT - MARGIN}" text-anchor="end">0</text>',
        polyline(ref["steps"], ref["loss"], top, "#999999"),
        polyline(zs["steps"], zs["loss"], top, "#1f77b4"),
        f'<text x="{WIDTH - MARGIN}" y="{MARGIN}" text-anchor="end" fill="#1f77b4">'
        'zerostate.torch, 2 ranks (rank 0\'s loss)</text>',
        f'<text x="{WIDTH - MARGIN}" y="{MARGIN + 16}" text-anchor="end" fill="#999999">'
        'torch.optim.AdamW, same batches</text>',
        "</svg>",
    ]
    return "\n".join(lines) + "\n"


def main(zs_loss, ref_loss, zs_weights, ref_weights, out_svg):
    with open(zs_loss) as f:
        zs = json.load(f)
    with open(ref_loss) as f:
        ref = json.load(f)
    first, last = zs["loss"][0], zs["loss"][-1]
    print(f"demo: loss fell from {first:.4f} to {last:.4f} in {len(zs['loss'])} steps "
          f"(torch.optim.AdamW: {ref['loss'][0]:.4f} to {ref['loss'][-1]:.4f})")
    loss_gap = max(abs(a - b) for a, b in zip(zs["loss"], ref["loss"]))
    dist, largest = distance(torch.load(zs_weights), torch.load(ref_weights))
    print(f"demo: distance from torch.optim.AdamW: final weights {dist:.2e} apart "
          f"(relative L2; largest element {largest:.2e}), the loss per step at most "
          f"{loss_gap:.2e}")
    with open(out_svg, "w") as f:
        f.write(svg(zs, ref))
    print(f"demo: loss curve written to {out_svg}")
    ok = last < 0.8 * first and dist < 1e-3
    if not ok:
        print("demo: FAILED: the loss did not fall, or the runs differ", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
