"""Generated contracts (lease, services agreement, NDA) with rule-linked question groups.

``generate_group(seed, level)`` is the entry point; ``splits`` says which seeds belong to which
split; ``csv_format`` reads and writes the batch-scoring CSV; ``checker`` recomputes every gold
answer from the document text alone.
"""

from apps.contracts.generator import KINDS, generate_group, generate_groups
from apps.contracts.questions import DEPENDS_ON, DERIVED, SCHEMAS
from apps.contracts.types import GeneratedQuestion, Group

__all__ = [
    "DEPENDS_ON", "DERIVED", "KINDS", "SCHEMAS", "GeneratedQuestion", "Group", "generate_group",
    "generate_groups",
]
