// The framework's test stages as a plugin, so that process-level tests can drive them through
// the `uvflow` command (tests/cli_test.sh).
#include "tests/support/test_stages.hpp"

UVFLOW_PLUGIN("uvflow test stages", uvflow::test::register_test_stages)
