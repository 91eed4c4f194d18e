"""The Gymnasium tests run in a temporary working directory: MuJoCo writes its warnings
(PointMaze and Pusher have one) to MUJOCO_LOG.TXT in the directory where it first ran,
which must not be the checkout. Servers started here get the checkout on PYTHONPATH
(tests.envs.gymenv.textenvs is imported by id)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="package", autouse=True)
def _away_from_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("gymenv-cwd"))
        yield
