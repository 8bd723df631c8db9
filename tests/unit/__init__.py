import pytest

# assertion helpers shared by several test modules: pytest explains their failures too
pytest.register_assert_rewrite("tests.unit.role_policy")
