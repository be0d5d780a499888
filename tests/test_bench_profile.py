"""`make profile` on the CPU: which bench passes it picks, the ncu command it runs for each, how it
reads ncu's CSV, and what it writes and refuses, with a stand-in `ncu` that prints what
Nsight Compute's --csv --page details prints. The real profile needs a GPU and ncu."""

import re
import stat
import sys
import textwrap

import pytest

from build_scripts.bench.layers import COVERAGE_CONFIGS_2D, problems
from build_scripts.bench.profile import (
    OUR_KERNELS, SECTIONS, STALL_METRICS, markdown, metric, ncu_command, optional_options, parse_details, run_profile,
    short_name, targets, top_stalls,
)
from build_scripts.bench.schema import parse_configs
from build_scripts.errors import HarnessError

# What Nsight Compute 2025's --csv --page details prints: rule columns after the metric's, a
# trailing comma, kernel names with their return type and casts in their template arguments,
# rule rows with no metric, and "Memory Throughput" in two sections (a percentage, then a rate).
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",'
          '"Rule Description","Estimated Speedup Type","Estimated Speedup",')
ROW_KERNEL = "void at::native::dwconv::grad_weight_row_kernel<c10::BFloat16, int, 4>(const T1 *, const T1 *)"
FINISH_KERNEL = "void at::native::dwconv::grad_weight_finish_kernel<c10::BFloat16>(const float *, T1 *)"
STREAM_KERNEL = ("void at::native::dwconv::channels_last_stream_kernel<c10::BFloat16, (bool)0, 7, 1>"
                 "(at::native::dwconv::Conv2dParams<T3>, const T1 *, T1 *)")
SOL = "GPU Speed Of Light Throughput"
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def details_csv(rows):
    lines = ["==PROF== Connected to process 4242 (python3.12)", "==PROF== Profiling \"grad_weight_row_kernel\"", HEADER]
    for kid, kernel, block, grid, section, metric_name, unit, value in rows:
        rule = ("", "", "", "", "") if metric_name else ("SOLBottleneck", "OPT", "This kernel is memory bound.", "global", "12.5")
        lines.append(",".join(f'"{v}"' for v in (kid, 4242, "python3.12", "127.0.0.1", kernel, 1, 7, block, grid, 0,
                                                  "9.0", section, metric_name, unit, value, *rule)) + ",")
    return "\n".join(lines) + "\n==PROF== Disconnected from process 4242\n"


SAMPLE = details_csv([
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", SOL, "Duration", "ns", "61,234"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", SOL, "SM Frequency", "hz", "1,755,000,000"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", SOL, "DRAM Throughput", "%", "55.1"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", SOL, "Memory Throughput", "%", "57.3"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", SOL, "", "", ""),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Memory Workload Analysis", "Memory Throughput", "byte/s",
     "1,650,000,000,000"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Occupancy", "Achieved Occupancy", "%", "71.9"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Launch Statistics", "Registers Per Thread", "register/thread", "48"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Command line profiler metrics", STALL.format("long_scoreboard"),
     "", "3.21"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Command line profiler metrics", STALL.format("barrier"), "", "0.4"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Command line profiler metrics", STALL.format("wait"), "", "1.07"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Command line profiler metrics", STALL.format("selected"), "", "4"),
    (1, FINISH_KERNEL, "(32, 8, 1)", "(24, 1, 1)", SOL, "Duration", "ns", "2,150"),
])

NO_KERNELS = "==PROF== Connected to process 4242 (python3.12)\n==WARNING== No kernels were profiled.\n"
HELP_2025 = "  --clock-control arg\n  --rename-kernels arg (=on)\n  --config-file arg (=on)\n  -k [ --kernel-name ] arg\n"


def test_the_passes_it_profiles_are_the_benchs_chosen_by_set_pass_and_label():
    found = targets(["Mamba conv1d"], ["backward_weight"], r"L=2048 b8 bfloat16 contiguous")
    assert [t.label for t in found] == [f"Mamba conv1d {c} L=2048 b8 bfloat16 contiguous" for c in (1536, 2048, 4096, 5120)]
    assert all(t.passname == "backward_weight" for t in found)
    # the profiled process finds its problem again by its index among the same sets
    assert all(problems(["Mamba conv1d"])[t.index] == t.problem for t in found)
    # batch-1 2D layers time the forward only: a weight-gradient profile leaves them out
    assert all(t.problem.batch == 64 for t in targets(["ConvNeXt-T"], ["backward_weight"]))


@pytest.mark.parametrize("sets, passes, match, message", [
    (["Mamba"], ["backward_weight"], "", r"unknown layer set\(s\) \['Mamba'\]"),
    (["ConvNeXt-T"], ["backward"], "", r"unknown pass\(es\) \['backward'\]; PASSES takes forward, backward_input"),
    (["ConvNeXt-T"], ["forward"], "(", r"MATCH='\(' is not a regular expression"),
    (["ConvNeXt-T"], ["forward"], "float64", r"no bench problem of \['ConvNeXt-T'\] matches MATCH='float64'"),
])
def test_a_choice_that_names_nothing_is_refused_by_name(sets, passes, match, message):
    with pytest.raises(HarnessError, match=message):
        targets(sets, passes, match)


def test_the_profiled_process_finds_a_problem_of_other_configurations_again():
    """CONFIGS changes the problem list, so the profiled process is told them beside the index."""
    [target] = targets(["ConvNeXt-T"], ["forward"], r"96@56 b64 float32 channels_last", COVERAGE_CONFIGS_2D)
    sets_arg, index_arg, pass_arg, configs_arg = ncu_command("ncu", "python3", target, ["ConvNeXt-T"],
                                                             configs_2d=COVERAGE_CONFIGS_2D)[-4:]
    assert problems([sets_arg], parse_configs(configs_arg))[int(index_arg)] == target.problem
    assert pass_arg == "forward"
    assert problems([sets_arg])[int(index_arg)] != target.problem  # the list holds another there


def test_the_ncu_command_profiles_our_kernels_in_one_process_a_problem():
    [target] = targets(["ConvNeXt-T"], ["backward_weight"], r"96@56 b64 bfloat16")
    command = ncu_command("/usr/bin/ncu", "/gpu/python3", target, ["ConvNeXt-T"], optional_options(HELP_2025))
    assert command[:14] == ["/usr/bin/ncu", "--csv", "--page", "details", "--print-units", "base",
                            "--kernel-name-base", "demangled", "--clock-control", "none",
                            "--rename-kernels", "off", "--config-file", "off"]
    assert command[14:16] == ["-k", OUR_KERNELS]
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--section"] == list(SECTIONS)
    assert command[command.index("--metrics") + 1] == STALL_METRICS
    assert re.fullmatch(STALL_METRICS.removeprefix("regex:"), STALL.format("long_scoreboard"))
    assert command[-7:] == ["/gpu/python3", "-m", "build_scripts.bench.profile", "ConvNeXt-T", str(target.index),
                            "backward_weight", ""]
    # an ncu whose --help does not list them gets neither option
    assert "--rename-kernels" not in ncu_command("ncu", "python3", target, None, optional_options("  --csv\n"))


def test_ncus_details_csv_is_read_a_kernel_at_a_time():
    row, finish = parse_details(SAMPLE)
    assert (row["id"], row["block"], row["grid"]) == ("0", "(256, 1, 1)", "(1536, 4, 1)")
    assert row["metrics"]["Duration"] == ("61,234", "ns")
    assert row["metrics"]["Achieved Occupancy"] == ("71.9", "%")
    assert "" not in row["metrics"]  # the rule's row is advice, not a metric
    assert metric(row, SOL, "Memory Throughput") == ("57.3", "%")
    assert metric(row, None, "Memory Throughput") == ("57.3", "%")
    assert top_stalls(row) == "long_scoreboard 3.2, wait 1.1"
    assert finish["kernel"] == FINISH_KERNEL and list(finish["metrics"]) == ["Duration"]
    with pytest.raises(HarnessError, match="no Kernel Name / Metric Name columns"):
        parse_details('"ID","Kernel"\n"0","x"\n')


@pytest.mark.parametrize("demangled, short", [
    (ROW_KERNEL, "grad_weight_row_kernel<BFloat16, int, 4>"),
    (STREAM_KERNEL, "channels_last_stream_kernel<BFloat16, (bool)0, 7, 1>"),
    ("at::native::dwconv::pixel_kernel<float, (bool)1, 3>(const T1 *)", "pixel_kernel<float, (bool)1, 3>"),
    ("void at::native::dwconv::probe_kernel()", "probe_kernel"),
])
def test_a_kernel_is_named_by_its_template_without_its_parameters(demangled, short):
    assert short_name(demangled) == short


def test_the_markdown_has_a_line_a_kernel():
    [target] = targets(["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8 bfloat16 contiguous")
    text = markdown([(target, k) for k in parse_details(SAMPLE)], "# profile")
    lines = text.splitlines()
    assert lines[2] == ("| problem | pass | kernel | grid | block | duration | SM MHz | DRAM % | memory % | SM % | "
                        "occupancy % | registers | cycles/issue | top stalls (cycles/issue) |")
    assert lines[4] == ("| Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous | backward_weight | "
                        "`grad_weight_row_kernel<BFloat16, int, 4>` | (1536, 4, 1) | (256, 1, 1) | 61,234 ns | "
                        "1755 | 55.1 | 57.3 |  | 71.9 | 48 |  | long_scoreboard 3.2, wait 1.1 |")
    assert len(lines) == 6


def stand_in_ncu(tmp_path, output, exit_code=0, stderr="", fail_from=0):
    """An `ncu` that answers --help and --version as 2025's does, logs each profiling command line to
    calls.txt, and prints `output` (from its fail_from-th profiling call on: `stderr` and exit_code)."""
    script = tmp_path / "ncu"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        from pathlib import Path
        if sys.argv[1:] == ["--help"]:
            sys.stdout.write({HELP_2025!r}); sys.exit(0)
        if sys.argv[1:] == ["--version"]:
            sys.stdout.write("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1)\\n")
            sys.exit(0)
        log = Path({str(tmp_path / "calls.txt")!r})
        calls = log.read_text().splitlines() if log.exists() else []
        log.write_text("\\n".join(calls + [" ".join(sys.argv[1:])]) + "\\n")
        sys.stdout.write({output!r})
        if len(calls) + 1 >= {fail_from} > 0 or {fail_from} == 0 and {exit_code}:
            sys.stderr.write({stderr!r})
            sys.exit({exit_code})
        """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_a_run_writes_the_table_the_raw_csv_and_a_log_a_target(tmp_path):
    out = tmp_path / "out"
    report = run_profile(out, ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8", ncu=stand_in_ncu(tmp_path, SAMPLE))
    text = report.read_text()
    assert "Version 2025.3.1.0 (build 1); clocks as the card runs them (--clock-control none)" in text
    rows = [line for line in text.splitlines() if line.startswith("| Mamba")]
    assert len(rows) == 4  # two kernels for each of the two layouts
    assert {row.split(" | ")[0] for row in rows} == {"| Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous",
                                                     "| Mamba conv1d 1536 L=2048 b8 bfloat16 channels_last"}
    raw = (out / "profile.csv").read_text()
    assert raw.count("# Mamba conv1d 1536 L=2048 b8 bfloat16") == 2 and raw.count(HEADER) == 2
    assert sorted(p.name for p in out.glob("profile-*.log")) == ["profile-1.log", "profile-2.log"]
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == 2 and all("--clock-control none --rename-kernels off --config-file off" in c for c in calls)
    assert "kernel paths off" not in text


def test_a_run_with_kernel_paths_off_says_its_kernels_are_ours_without_them(tmp_path):
    report = run_profile(tmp_path / "out", ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8 bfloat16 contiguous",
                         ncu=stand_in_ncu(tmp_path, SAMPLE), paths_off=["row_backward", "column_backward"])
    assert ("(--clock-control none); kernel paths off (DWCONV_DISABLE_KERNELS): row_backward, column_backward, so the "
            "kernels are those ours runs without them") in report.read_text()


def test_a_target_whose_process_fails_is_recorded_with_its_traceback_and_the_rest_still_run(tmp_path):
    crash = stand_in_ncu(tmp_path, "==PROF== Connected to process 4242\n==ERROR== The application returned an error code (1).\n",
                         exit_code=1, stderr="Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                             "torch.OutOfMemoryError: CUDA out of memory.\n", fail_from=1)
    with pytest.raises(HarnessError, match=r"contiguous backward_weight: ==ERROR== The application returned an error "
                                           r"code \(1\).; Traceback .*torch.OutOfMemoryError: CUDA out of memory"):
        run_profile(tmp_path / "out", ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8", ncu=crash)
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 2  # the second target still ran
    text = (tmp_path / "out" / "profile.md").read_text()
    assert "## Not profiled" in text and "torch.OutOfMemoryError" in text
    assert "OutOfMemoryError" in (tmp_path / "out" / "profile-1.log").read_text()


def test_the_profiled_processs_own_words_do_not_stop_the_run(tmp_path):
    """Only ncu's own ==ERROR== lines decide that ncu failed: a traceback that happens to say "not
    supported" is the target's failure, and the next target runs."""
    crash = stand_in_ncu(tmp_path, "==ERROR== The application returned an error code (1).\n", exit_code=1,
                         stderr="RuntimeError: CUDA error: operation not supported\n", fail_from=1)
    with pytest.raises(HarnessError, match="operation not supported"):
        run_profile(tmp_path / "out", ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8", ncu=crash)
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 2


def test_a_target_that_profiles_no_kernel_of_ours_is_an_error_not_an_empty_table(tmp_path):
    with pytest.raises(HarnessError, match=r"no kernel of ours was profiled; ==WARNING== No kernels were profiled."):
        run_profile(tmp_path / "out", ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8 bfloat16 contiguous",
                    ncu=stand_in_ncu(tmp_path, NO_KERNELS))


def test_ncus_own_error_stops_the_run_with_its_message(tmp_path):
    failing = stand_in_ncu(tmp_path, textwrap.dedent("""\
        ==PROF== Connected to process 4242
        ==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters
        """), exit_code=0)
    with pytest.raises(HarnessError, match=r"ncu failed on Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous "
                                           r"backward_weight \(exit 0\): ==ERROR== ERR_NVGPUCTRPERM"):
        run_profile(tmp_path / "out", ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8", ncu=failing)
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 1  # no second target: it would fail alike


def test_no_target_is_begun_that_would_end_past_the_limit(tmp_path):
    out = tmp_path / "out"
    run_profile(out, ["Mamba conv1d"], ["backward_weight"], r"L=2048 b8 bfloat16 contiguous",
                ncu=stand_in_ncu(tmp_path, SAMPLE), stop_after_s=0.0)
    assert not (tmp_path / "calls.txt").exists()
    assert (out / "profile.md").read_text().count("not begun: the 0 s limit") == 4


def test_no_ncu_is_an_error_that_says_how_to_name_it(tmp_path):
    with pytest.raises(HarnessError, match=r"Nsight Compute's `/nowhere/ncu` is not on PATH, in /usr/local/cuda/bin "
                                           r"or in /opt/nvidia/nsight-compute/<version> \(set NCU="):
        run_profile(tmp_path, ["Mamba conv1d"], ["backward_weight"], "", ncu="/nowhere/ncu")
