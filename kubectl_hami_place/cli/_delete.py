"""`delete`: remove HamiPodPlacements by name, or all of a namespace (optionally only those in given phases)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    DryRun,
    DryRunOption,
    KubeconfigOption,
    NamespaceOption,
    OutputFormat,
    OutputOption,
    PlacementLabelsOption,
    YesOption,
    confirm,
    emit,
    label_query,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import CliError, UsageProblem
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.cli.output import Block, Text
from kubectl_hami_place.core.errors import clip
from kubectl_hami_place.core.names import PHASES, Phase
from kubectl_hami_place.kube.errors import KubeError, KubeNotFound

HELP = (
    "Delete HamiPodPlacements by name, or --all of the namespace or those -l selects (narrowed by --phase)."
    + examples(
        "kubectl hami-place delete -n team-a pin-3k9x2m7q4w1z --yes",
        "kubectl hami-place delete -n team-a --all --phase Expired --yes",
        "kubectl hami-place delete -n team-a -l team=a --phase Failed --yes",
    )
)


def _complete_placements(ctx: typer.Context, incomplete: str) -> list[str]:
    """Placement names of the namespace."""
    from kubectl_hami_place.cli._completion import placement_names

    return placement_names(ctx, incomplete)


@dataclass(frozen=True)
class Deleted:
    """What was (or, under dry-run, would be) deleted, names that were not found, and those not tried after a
    deletion failed (the first of them the one that failed)."""

    namespace: str
    names: tuple[str, ...]
    missing: tuple[str, ...]
    dry_run: DryRun
    not_tried: tuple[str, ...] = ()

    def to_data(self) -> Any:
        """Names per outcome."""
        return {
            "namespace": self.namespace,
            "deleted": list(self.names),
            "notFound": list(self.missing),
            "notDeleted": list(self.not_tried),
            "dryRun": self.dry_run.value,
        }

    def to_blocks(self) -> list[Block]:
        """kubectl's `hamipodplacement.scheduling.hami.placement.com "x" deleted` lines."""
        suffix = "" if self.dry_run is DryRun.none else f" ({self.dry_run.value} dry run)"
        lines = [f'hamipodplacement "{name}" deleted from namespace {self.namespace}{suffix}' for name in self.names]
        if not lines and not self.missing and not self.not_tried:
            lines = [f"No placements to delete in namespace {self.namespace}."]
        return [Text(tuple(lines))]


def delete(
    *,
    names: Annotated[
        list[str] | None, typer.Argument(help="Placement names.", autocompletion=_complete_placements)
    ] = None,
    all_placements: Annotated[bool, typer.Option("--all", help="Every placement of the namespace.")] = False,
    phase: Annotated[
        list[str] | None,
        typer.Option(
            "--phase", help=f"With --all or -l: only placements in this phase ({', '.join(PHASES)}); repeatable."
        ),
    ] = None,
    selector: PlacementLabelsOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    namespace: NamespaceOption = None,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Delete HamiPodPlacements."""
    from kubectl_hami_place.core.k8s_names import is_object_name
    from kubectl_hami_place.kube import placements

    wanted = list(names or [])
    phases = set(phase or [])
    labels = label_query(selector, "placement")
    if wanted and (all_placements or labels):
        raise UsageProblem("names and --all or -l conflict", "pass placement names, or --all or -l, not both")
    if phases and not (all_placements or labels):
        raise UsageProblem("--phase only narrows --all or -l", "add --all or -l, or drop --phase")
    if not wanted and not (all_placements or labels):
        raise UsageProblem("nothing to delete", "pass placement names, --all or -l")
    unknown = sorted(phases - set(PHASES))
    if unknown:
        raise UsageProblem(f"unknown phase {clip(unknown[0])!r}", f"use one of {', '.join(PHASES)}")
    invalid = next((name for name in wanted if not is_object_name(name)), None)
    if invalid is not None:
        # Checked before anything is deleted: a bad name part-way through the list must not leave the rest half done.
        raise UsageProblem(f"{clip(invalid)!r} is not a placement name", "check the names (kubectl hami-place list)")
    where = target(kubeconfig, context, namespace, as_user=as_user)
    ns = where.one_namespace
    if all_placements or labels:
        stored = placements.list_placements(where.kube, ns, labels)
        wanted = [
            item["metadata"]["name"]
            for item in stored
            if not phases or ((item.get("status") or {}).get("phase") or Phase.Pending) in phases
        ]
    missing: list[str] = []
    deleted: list[str] = []
    if wanted and dry_run is not DryRun.client:
        description = wanted[0] if len(wanted) == 1 else f"{len(wanted)} placements"
        if dry_run is DryRun.none and not confirm(f"delete {description} in namespace {ns}", yes):
            raise CliError("not confirmed", "nothing was deleted")
    failure: KubeError | None = None
    not_tried: tuple[str, ...] = ()
    for index, name in enumerate(wanted):
        try:
            if dry_run is DryRun.client:
                placements.get_placement(where.kube, ns, name)
            else:
                placements.delete_placement(where.kube, ns, name, dry_run=dry_run is DryRun.server)
        except KubeNotFound:
            missing.append(name)
            continue
        except KubeError as error:
            # Stop there (a refusal or an unreachable server repeats for every name), after saying what was deleted.
            failure, not_tried = error, tuple(wanted[index:])
            break
        deleted.append(name)
    emit(Deleted(ns, tuple(deleted), tuple(missing), dry_run, not_tried), output)
    if failure is not None:
        if len(not_tried) > 1:
            warn(f"{len(not_tried) - 1} placement(s) after {not_tried[0]} not tried: {clip(', '.join(not_tried[1:]))}")
        raise failure
    if missing:
        raise CliError(
            f"placement {', '.join(missing)} not found in namespace {ns}",
            "check the names (kubectl hami-place list) and -n",
        )
