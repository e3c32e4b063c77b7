"""`recipe_ablation.py` on shapes compress does not offer: at every width below the teacher's, half the FFN.

    OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION=bf16 python benchmarks/narrow_ffn_ablation.py --task sst2 \
        --teacher runs/qs-amx-1205/teacher --key-suffix=-qs-amx-1205 --candidate bert-2x192-ffn384 \
        --variants recipe --steps 3000 --eval-every 1000

Every shape of ``selection.SPEED_WIDTHS`` below the teacher's width gets ``<prefix>-<layers>x<width>-ffn<width*2>``
(half of the teacher's FFN-to-width ratio of 4) beside the shapes compress times; the arguments and the
results are ``recipe_ablation.py``'s. Compress offered these shapes on 2026-12-05 for one commit: the
twelve more candidates cost the main job's timing its reach (notes ``recipe-reading.md``,
``quickstart-seeds-reading.md``); it now offers the widest width's from two layers
(``selection.NARROWER_HALF_FFN_DEPTHS``: bert-2x256-ffn512, measured here first).
"""

from __future__ import annotations

import recipe_ablation

import kdbert.families.selection as selection

_offered = selection.speed_shapes


def speed_shapes_with_narrow_ffn(teacher_config, narrow_ffn: bool = True) -> dict[str, dict]:
    """Compress's shapes and, below the teacher's width, each depth with half its FFN."""
    shapes = _offered(teacher_config, narrow_ffn)
    width = teacher_config.hidden_size
    for name, shape in list(shapes.items()):
        if "-ffn" not in name and shape["hidden_size"] < width:
            half = {**shape, "intermediate_size": shape["intermediate_size"] // 2}
            shapes[f"{name}-ffn{half['intermediate_size']}"] = half
    return shapes


if __name__ == "__main__":
    selection.speed_shapes = speed_shapes_with_narrow_ffn  # read at call time by selection's candidates
    recipe_ablation.main()
