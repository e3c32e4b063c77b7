"""Classic knowledge distillation (Hinton et al., 2015) on a task: one stage, two matches.

Loss per batch (both terms already weighted, logged as ``soft`` and ``hard``;
:func:`kdbert.methods.base.logit_matches`)::

    classification, kd_loss "kl":  soft = alpha * T^2 * KL(softmax(z_t/T) || softmax(z_s/T))
                                   hard = (1 - alpha) * CE(z_s, y)
    classification, kd_loss "mse": soft = alpha * MSE(z_s, z_t)          (logits, no T)
                                   hard = (1 - alpha) * CE(z_s, y)
    regression (STS-B):            soft = alpha * MSE(s, t)              (student vs teacher output)
                                   hard = (1 - alpha) * MSE(s, gold)

KL is ``batchmean`` by default (:func:`kdbert.core.losses.kl_div_loss`); ``--kd-reduction mean`` divides
it by the number of classes as well, as the BERT-PKD reference does; a term whose weight is 0 is left out,
and with ``alpha = 0`` the teacher is never run (plain fine-tuning).

Defaults: ``alpha = 0.7``, ``T = 20``: the vanilla-KD configuration of the BERT-PKD reference
code (its ``kd`` preset), whose BERT6 results are the KD baseline in the reference table, but with
the per-example (``batchmean``) KL, which weights the soft term C times more than the reference's
``mean``; ``--recipe kd/default`` is the reference's configuration, reduction included.
Other anchors: torchdistill's GLUE KD uses T = 3 with 0.1 on the soft term (``--recipe
kd/torchdistill``); DistilBERT's task distillation alpha 0.5, T 2; TextBrewer T 4..8. With
``--temperature 10`` KD is exactly BERT-PKD with beta = 0. Epochs, learning rate and batch size
default to :data:`kdbert.methods.finetune.TASK_DEFAULTS` (tuned for ~20M-parameter students).

The student (:func:`kdbert.methods.base.resolve_student`, shared with PKD and TinyBERT):
``--student`` is an HF folder (any sequence-classification architecture; a new head is added
when its label count differs) or a preset (tinybert4, tinybert6: random init, the teacher's
vocabulary); ``--student-layers`` is ``K`` (the first K teacher layers) or a list ``0,2,4`` of
0-based teacher layers copied into a BERT student of the teacher's width (embeddings and pooler
copied, fresh classifier). Default: the first half of the teacher's layers, as the PKD paper's
vanilla-KD students.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdbert.core.method import DistillContext, Method, Plan, Student
from kdbert.core.stages import task_stage
from kdbert.data.tasks import TaskSpec
from kdbert.methods.base import (LogitKDConfig, StudentLayerOptions, check_kd_loss, kd_matches, kd_report,
                                 resolve_student, student_description, teacher_if_needed)


@dataclass
class KDConfig(StudentLayerOptions, LogitKDConfig):
    """Classic KD (see the module docstring)."""

    method = "kd"


class KD(Method):
    name, help, config = "kd", "Hinton soft targets", KDConfig

    def initial_student(self, teacher, spec: TaskSpec, config: KDConfig) -> Student:
        """KD's initial student (:func:`kdbert.methods.base.resolve_student`)."""
        check_kd_loss(config.kd_loss, spec)
        return resolve_student(teacher, spec, config)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``kd`` whose matches are :func:`~kdbert.methods.base.logit_matches`."""
        config, spec = ctx.config, ctx.spec
        stages = [task_stage("kd", config, kd_matches(config, spec), ctx)]
        return Plan({"student": ctx.student.model}, teacher_if_needed(ctx.teacher, stages), stages,
                    report={"loss": kd_report(config, spec), **student_description(ctx.student)})


METHOD = KD()
