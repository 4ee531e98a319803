"""Every cdk-nag finding this app accepts, with the reason, in one reviewable place."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.stacks.control_plane import ControlPlaneStack


def acknowledge_control_plane(stack: ControlPlaneStack) -> None:
    """Acknowledge the control plane stack's accepted findings (none yet)."""
