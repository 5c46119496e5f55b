"""Which config fields an input actually set: the check behind "every accepted field either works
or is rejected" (a field that the chosen backend, protocol or command never reads is refused at
load time with a one-line error naming it). A leaf module: it imports nothing of swerl.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel


def set_fields(model: BaseModel, names: Iterable[str]) -> list[str]:
    """Those of ``names`` that the input set to a value other than the field's default.

    A field left at its default is not counted even when given explicitly, so a config dumped
    whole (``RUN_DIR/config.yaml``) and read back passes the same checks as the file it came from.
    """
    fields = type(model).model_fields
    return [n for n in names if n in model.model_fields_set
            and getattr(model, n) != fields[n].get_default(call_default_factory=True)]
