"""Which tests are end-to-end: they start real processes, so ``make test-unit`` leaves them out.

tests/conftest.py gives each listed test the ``e2e`` marker; tests/test_markers.py checks every
entry still names a real file or test.
"""

from __future__ import annotations

E2E: tuple[str, ...] = (
    "capture/test_capture_e2e.py",
    "capture/test_capture_failures.py",
    "capture/test_capture_orphans.py",
    "capture/test_capture_timeout.py",
    "capture/test_step_sources_e2e.py",
    "capture/test_warm.py::test_a_warm_run_is_the_cold_run",
    "capture/test_warm.py::test_a_warm_run_ends_with_the_scripts_own_exit",
    "capture/test_warm.py::test_a_warm_process_answers_like_popen",
    "capture/test_warm.py::test_the_servers_death_mid_run_reruns_it_cold",
    "capture/test_warm.py::test_after_the_servers_death_runs_start_cold",
    "capture/test_warm.py::test_a_dead_server_refuses_new_runs",
    "capture/test_warm.py::test_advisor_killed_outright_leaves_neither_server_nor_child",
    "cli/test_diagnose_e2e.py",
    "cli/test_diagnose_interrupt_e2e.py",
    "cli/test_memory_budget_e2e.py",
    "cli/test_right_answers_e2e.py",
    "cli/test_entrypoints.py",
    "cli/test_script_own_failures.py",
    "distributed/test_multinode_e2e.py::test_two_nodes_on_localhost_make_one_job",
    "distributed/test_multinode_e2e.py::test_a_failing_rank_on_one_node_is_named_and_every_rank_stops",
    "distributed/test_parallel_analysis.py",
    "distributed/test_torchrun_e2e.py",
    "engine/test_packaging.py::test_wheel_contains_every_rule_file",
    "engine/test_packaging.py::test_rules_load_from_the_unpacked_wheel",
    "examples/test_api_example.py::test_the_api_example_runs_without_fixes",
    "examples/test_api_example.py::test_the_api_example_runs_with_its_fix_trial",
    "examples/test_examples_run.py::test_example_runs",
    "examples/test_real_scripts.py",
    "examples/test_zoo_diagnosis.py",
    "faults/test_inputs.py::test_script_name_with_a_quote_is_diagnosed",
    "faults/test_outputs.py::test_full_disk_is_one_line_error_and_leaves_no_temp_file",
    "faults/test_processes.py",
    "fixes/test_end_to_end.py",
    "frameworks/test_frameworks.py",
    "fixes/test_on_top_and_larger_batch.py::test_a_real_run_gets_the_larger_batch",
    "report/test_report_compare_real.py",
    "report/test_report_tensorboard.py::test_tensorboard_serves_the_run_over_http",
    "report/test_report_tensorboard.py::test_killing_advisor_never_leaves_tensorboard_running",
    "sweep/test_sweep.py::test_a_real_sweep_marks_the_cells_over_the_memory_budget",
    "sweep/test_sweep_e2e.py",
)
"""Tests (a file, or ``file::test``) that start real processes: a capture child, ``advisor``,
torchrun, a wheel build or TensorBoard. They get the ``e2e`` marker, which ``make test-unit``
deselects (``-m "not e2e"``); everything else runs in-process in well under a second."""
