"""`make profile` on the CPU: which bench passes it picks, the ncu command it runs for each, how it
reads ncu's CSV, and what it writes and refuses, with a stand-in `ncu` that prints what
Nsight Compute's --csv --page details prints. The real profile needs a GPU and ncu."""

import stat
import sys
import textwrap

import pytest

from build_scripts.bench.layers import problems
from build_scripts.bench.profile import (
    OUR_KERNELS, SECTIONS, markdown, ncu_command, parse_details, run_profile, short_name, targets,
)
from build_scripts.errors import HarnessError

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
ROW_KERNEL = "at::native::dwconv::grad_weight_row_kernel<c10::BFloat16, int, 4>(const T1 *, const T1 *)"
FINISH_KERNEL = "at::native::dwconv::grad_weight_finish_kernel<c10::BFloat16>(const float *, T1 *)"


def details_csv(rows):
    lines = ["==PROF== Connected to process 4242 (python3.12)", "==PROF== Profiling \"grad_weight_row_kernel\"", HEADER]
    for kid, kernel, block, grid, section, metric, unit, value in rows:
        lines.append(",".join(f'"{v}"' for v in (kid, 4242, "python3.12", "127.0.0.1", kernel, 1, 7, block, grid, 0,
                                                  "9.0", section, metric, unit, value)))
    return "\n".join(lines) + "\n==PROF== Disconnected from process 4242\n"


SAMPLE = details_csv([
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "GPU Speed Of Light Throughput", "Duration", "nsecond", "61234"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "55.1"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Occupancy", "Achieved Occupancy", "%", "71.9"),
    (0, ROW_KERNEL, "(256, 1, 1)", "(1536, 4, 1)", "Launch Statistics", "Registers Per Thread", "register/thread", "48"),
    (1, FINISH_KERNEL, "(256, 1, 1)", "(24, 1, 1)", "GPU Speed Of Light Throughput", "Duration", "nsecond", "2150"),
])


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


def test_the_ncu_command_profiles_our_kernels_in_one_process_a_problem():
    [target] = targets(["ConvNeXt-T"], ["backward_weight"], r"96@56 b64 bfloat16")
    command = ncu_command("/usr/bin/ncu", "/gpu/python3", target, ["ConvNeXt-T"])
    assert command[:10] == ["/usr/bin/ncu", "--csv", "--page", "details", "--print-units", "base",
                            "--kernel-name-base", "demangled", "-k", OUR_KERNELS]
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--section"] == list(SECTIONS)
    assert command[-6:] == ["/gpu/python3", "-m", "build_scripts.bench.profile", "ConvNeXt-T", str(target.index),
                            "backward_weight"]


def test_ncus_details_csv_is_read_a_kernel_at_a_time():
    row, finish = parse_details(SAMPLE)
    assert (row["id"], row["block"], row["grid"]) == ("0", "(256, 1, 1)", "(1536, 4, 1)")
    assert row["metrics"]["Duration"] == ("61234", "nsecond")
    assert row["metrics"]["Achieved Occupancy"] == ("71.9", "%")
    assert finish["kernel"] == FINISH_KERNEL and list(finish["metrics"]) == ["Duration"]
    assert short_name(ROW_KERNEL) == "grad_weight_row_kernel<BFloat16, int, 4>"
    with pytest.raises(HarnessError, match="no Kernel Name / Metric Name columns"):
        parse_details('"ID","Kernel"\n"0","x"\n')


def test_the_markdown_has_a_line_a_kernel():
    [target] = targets(["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8 bfloat16 contiguous")
    text = markdown([(target, k) for k in parse_details(SAMPLE)], "# profile")
    lines = text.splitlines()
    assert lines[2].startswith("| problem | pass | kernel | grid | block | duration | DRAM % |")
    assert lines[4] == ("| Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous | backward_weight | "
                        "`grad_weight_row_kernel<BFloat16, int, 4>` | (1536, 4, 1) | (256, 1, 1) | 61234 nsecond | "
                        "55.1 |  |  | 71.9 | 48 |  |")
    assert len(lines) == 6


def stand_in_ncu(tmp_path, output, exit_code=0):
    script = tmp_path / "ncu"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({output!r})\nsys.exit({exit_code})\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_a_run_writes_the_table_and_the_raw_csv(tmp_path):
    out = tmp_path / "out"
    report = run_profile(out, ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8", ncu=stand_in_ncu(tmp_path, SAMPLE))
    rows = [line for line in report.read_text().splitlines() if line.startswith("| Mamba")]
    assert len(rows) == 4  # two kernels for each of the two layouts
    assert {row.split(" | ")[0] for row in rows} == {"| Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous",
                                                     "| Mamba conv1d 1536 L=2048 b8 bfloat16 channels_last"}
    raw = (out / "profile.csv").read_text()
    assert raw.count("# Mamba conv1d 1536 L=2048 b8 bfloat16") == 2 and raw.count(HEADER) == 2


def test_ncus_own_error_stops_the_run_with_its_message(tmp_path):
    failing = stand_in_ncu(tmp_path, textwrap.dedent("""\
        ==PROF== Connected to process 4242
        ==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters
        """), exit_code=0)
    with pytest.raises(HarnessError, match=r"ncu failed on Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous "
                                           r"backward_weight \(exit 0\): ==ERROR== ERR_NVGPUCTRPERM"):
        run_profile(tmp_path / "out", ["Mamba conv1d"], ["backward_weight"], r"1536 L=2048 b8 bfloat16 contiguous",
                    ncu=failing)


def test_no_ncu_is_an_error_that_says_how_to_name_it(tmp_path):
    with pytest.raises(HarnessError, match=r"Nsight Compute's `/nowhere/ncu` is not on PATH \(set NCU="):
        run_profile(tmp_path, ["Mamba conv1d"], ["backward_weight"], "", ncu="/nowhere/ncu")
