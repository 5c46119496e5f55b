"""swerl.tasks stage: read Harbor task folders and datasets, convert benchmarks into tasks.

Public API: :func:`load_task`, :func:`load_tasks` (-> :class:`TaskSet`),
:func:`write_tasks_parquet`, :func:`write_tasks_jsonl`, :func:`import_humaneval`.
"""

from swerl.tasks.load import load_task, load_tasks
from swerl.tasks.task_folder import MalformedTask, Task, TaskConfig, TaskProblem, TaskSet
from swerl.tasks.rows import write_tasks_jsonl, write_tasks_parquet

__all__ = [
    "MalformedTask",
    "Task",
    "TaskConfig",
    "TaskProblem",
    "TaskSet",
    "import_humaneval",
    "load_task",
    "load_tasks",
    "write_tasks_jsonl",
    "write_tasks_parquet",
]


def import_humaneval(*args, **kwargs):  # noqa: ANN002, ANN003 - thin lazy re-export
    """See :func:`swerl.tasks.humaneval.import_humaneval`."""
    from swerl.tasks.humaneval import import_humaneval as _impl

    return _impl(*args, **kwargs)
