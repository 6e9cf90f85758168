"""scripts/benchmarks-md on the fixture logs folder tests/fixtures/gpu-logs (no GPU needed).

The fixture is a small gpu-check run with round numbers, so every ratio the
tables print can be checked by hand; an empty folder checks that each section
says in one line that it was skipped.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "benchmarks-md")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "gpu-logs")


def load_script():
    loader = importlib.machinery.SourceFileLoader("benchmarks_md", SCRIPT)
    spec = importlib.util.spec_from_loader("benchmarks_md", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


bm = load_script()


def sections(text: str) -> dict:
    """Section title -> its lines."""
    out, title = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:]
            out[title] = []
        elif title is not None and line.strip():
            out[title].append(line)
    return out


class FullRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = bm.render(FIXTURE, "abc1234", "2030-01-02")
        cls.parts = sections(cls.text)

    def test_header_says_how_to_regenerate(self):
        self.assertTrue(self.text.startswith("# lowbit benchmarks\n"))
        self.assertIn("`scripts/gpu-check`", self.text)
        self.assertIn("scripts/benchmarks-md LOGS --commit SHA --date YYYY-MM-DD", self.text)

    def test_every_table_names_date_gpu_commit_command(self):
        for title, lines in self.parts.items():
            with self.subTest(section=title):
                first = lines[0]
                self.assertIn("2030-01-02", first)
                self.assertIn("NVIDIA H100 80GB HBM3 (driver 580.159.04, CUDA 13.0)", first)
                self.assertIn("`abc1234`", first)
                self.assertIn("`SKIP_MEMCHECK=1 scripts/gpu-check`", first)

    def test_tables_are_well_formed(self):
        rows = [ln for ln in self.text.splitlines() if ln.startswith("|")]
        self.assertGreater(len(rows), 20)
        widths = []
        for ln in self.text.splitlines() + [""]:
            if ln.startswith("|"):
                widths.append(len(re.findall(r"(?<!\\)\|", ln)))
            elif widths:
                self.assertEqual(len(set(widths)), 1, widths)
                widths = []

    def test_run_checks(self):
        run = self.parts["The run"]
        self.assertIn("tests ok (100% tests passed, 0 tests failed out of 230; skipped 2)", run[1])
        self.assertIn("memcheck skipped (SKIP_MEMCHECK)", run[1])

    def test_peers_rows_ratio_and_limit(self):
        peers = self.parts["Calls as users make them, against the peers users have"]
        self.assertIn("Peers: torch 2.11.0+cu130, bitsandbytes 0.50.2, triton 3.6.0.", peers[0])
        self.assertIn("Copy bandwidth in the run: 3000 GB/s.", peers[0])
        for row in [
            "| `quantize_blockwise` bs4096 | 2^28 f16 | 500.0 | bnb 1500.0 | 3.00 | 0.50 / 0.17 of copy |  |",
            "| `dequantize_blockwise` bs256 (loop) | 4096x4096 f16 | 40.0 | bnb 20.0 | **0.50** |  |  |",
            "| `act_quant` (loop) | 128x7168 bf16 | 30.0 | DeepSeek Triton 45.0 | 1.50 |  | "
            "vs the peer: 1.2e-03 of codes differ |",
            "| `matmul_4bit` | 4096x4096 M=1 | 10.0 | bnb 15.0 | 1.50 | 1.80× / 1.20× cuBLAS | "
            "rel err vs cuBLAS: lowbit 3.7e-04, bnb 4.9e-04 |",
            "| `Matmul` int4 g128 M=1 | geomean of 6 shapes | 20.0 (out= 19.0) | cuBLAS fp16 50.0 | 2.50 | "
            "2.50× cuBLAS (out= 2.40×) |  |",
            "| `Matmul` int4 g128 M=1 | geomean of 6 shapes | 20.0 (out= 19.0) | tinygemm 25000 | 1250.00 |  |  |",
            "| `int8_vectorwise_quant` th=6 | 4096x4096 | — | — | — |  | error: RuntimeError: no kernel |",
        ]:
            self.assertIn(row, peers)

    def test_host_rows_over_launch_and_out(self):
        peers = self.parts["Calls as users make them, against the peers users have"]
        self.assertTrue(any("`torch.add(x, 1)` took 10.0, 8.0 with `out=`" in ln for ln in peers))
        self.assertIn("| `quantize_4bit` nf4 bs64 | 256 f16 | 25.0 | 20.0 | bnb 50.0 | 2.00 | 15.0 / 12.0 | +5.0 |",
                      peers)
        self.assertIn("| `act_quant` | 1x256 bf16 | 18.0 | — | DeepSeek Triton 12.0 | **0.67** | 8.0 | — |", peers)
        self.assertFalse(any(ln.startswith("| `torch.add") for ln in peers))

    def test_host_over_launch_computed_when_the_column_is_absent(self):
        rows = [{"op": "torch.add(x, 1) (reference)", "mode": "host", "lowbit_us": "7.5", "out_us": "6.5"},
                {"op": "dequantize_4bit nf4 bs64", "mode": "host", "size": "256 f16", "lowbit_us": "10.0",
                 "out_us": "9.0", "peer": "bitsandbytes", "peer_us": "20.0"}]
        self.assertIn("| `dequantize_4bit` nf4 bs64 | 256 f16 | 10.0 | 9.0 | bnb 20.0 | 2.00 | 2.5 / 2.5 | +1.0 |",
                      bm.section_host(rows))

    def test_quant_fraction_of_copy(self):
        quant = self.parts["Quantization kernels: fraction of copy bandwidth"]
        self.assertIn("Copy bandwidth in the run: 3000 GB/s", quant[0])
        self.assertIn("| `dequantize_4bit` nf4 | f32 | 4096 | 0.4500 | 2700.0 | 0.900 | ok |", quant)
        self.assertEqual(sum(ln.startswith("| `") for ln in quant), 3)

    def test_gemm_against_cublas(self):
        gemm = self.parts["Matmul against cuBLAS (`lowbit bench gemm`)"]
        self.assertIn("| int4:g128 | 2.00× | 0.90× |", gemm)
        self.assertIn("| nf4:g128 | 1.25× | 0.72× |", gemm)  # the skipped case leaves the geomean of one shape
        self.assertIn("| 4096x4096 | 1.25× (0.38) | skipped |", gemm)
        self.assertIn("| 8192x8192 | 50.0 | 720.0 |", gemm)  # cuBLAS µs
        # A pure read's speedup over cuBLAS: geomean of 20/6 and 50/15.
        self.assertTrue(any(ln.startswith("| *a pure read of int4:g128's bytes") and "*3.33×*" in ln for ln in gemm))

    def test_gemm_torch(self):
        torch = self.parts["Matmul through Python against cuBLAS and tinygemm (`scripts/bench_gemm.py`)"]
        self.assertIn("| 1 | 2.83× | 2.00× | 1.41× | 0.30–0.50 |", torch)
        self.assertIn("| 8192x8192 | 4.00× / 2.00× | 1.00× / 20.00× |", torch)

    def test_interchange(self):
        inter = self.parts["bitsandbytes interchange"]
        self.assertTrue(any(ln.startswith("Result: ok.") and "nf4-dq 2.5e-04, fp4 2.1e-03." in ln for ln in inter))
        self.assertIn("| nf4:bs64 | 0.0e+00 | 0.0e+00 |", inter)
        self.assertIn("| int8:th0 | 4.9e-05 | — |", inter)


    def test_optim(self):
        optim = next(v for k, v in self.parts.items() if k.startswith("Optimizers"))
        self.assertTrue(any("bitsandbytes 0.50.2" in ln and "3000 GB/s" in ln for ln in optim))
        self.assertIn("| AdamW8bit | float32 | 2.000 | 8.000 | 4.00 | 4.000 | 2.00 | 1.000 | 0.50 |  |", optim)
        self.assertIn("| AdEMAMix32bit | float32 | 4.000 | crashed | — | — | — | 2.000 | 0.50 |  |", optim)
        self.assertTrue(any(ln.startswith("| AdamW8bit x200 tensors |") and "2.000 ms (1.10x)" in ln for ln in optim))


    def test_int8(self):
        int8 = next(v for k, v in self.parts.items() if k.startswith("int8 GEMMs"))
        self.assertIn("| 4096 | 4096 x 4096 | 100.0 | 1374 | 0.69 | 1.50 | 1.60 | 1.80 | 120.0 | 2.50 | 1.67 | 1.25 |",
                      int8)
        self.assertIn("| 16 | 4096 x 4096 | 16.0 | 42 | 0.02 | — | 1.00 | 1.00 | 20.0 | — | 1.00 | — |", int8)
        self.assertIn("| 4096 | 4096 x 4096 | 250.0 | 0.72 | 2.00 | 1.2e-02 |", int8)
        self.assertIn("- int8_linear_matmul vs torch._int_mm, M >= 256: 1.50x over 1", int8)
        self.assertIn("- int8_linear (threshold 6) vs cuBLAS fp16 at 4096^3: 0.72x over 1", int8)


    def test_sparse(self):
        sparse = next(v for k, v in self.parts.items() if k.startswith("Block-sparse"))
        self.assertIn("| 4096 x 4096 x 4096 | fp16 | 64 | 0.90 | random | 0.050 | 275 | 0.050 (1.00) | 0.100 (2.00) |",
                      sparse)
        self.assertTrue(any("Geomean 1.41x torch's Triton bsr_dense_mm, 1.00x dense cuBLAS." in ln for ln in sparse))


    def test_attention(self):
        att = next(v for k, v in self.parts.items() if k.startswith("Attention"))
        self.assertIn("### Prefill (fp16, H = 2048 / D, B x S = 16384 tokens)", att)
        self.assertIn("| 128 | 32 x 512 | yes | 0.500 | 275 | 0.750 (1.50) | 0.250 (0.50) | ok |", att)
        self.assertIn("| 8 | 4096 | 16 | 0.0200 | 1678 | 0.0400 (2.00) | - | ok |", att)
        self.assertIn("- Geomean over the prefill rows: 1.22x sdpa_flash, 0.50x sdpa_cudnn.", att)
        self.assertTrue(any(ln.startswith("- Note: flash-attn is not importable") for ln in att))


class MissingInputs(unittest.TestCase):
    def test_each_section_says_so_in_one_line(self):
        with tempfile.TemporaryDirectory() as empty:
            parts = sections(bm.render(empty, "abc1234", "2030-01-02"))
        self.assertEqual(len(parts), 11)
        for title, lines in parts.items():
            if title == "The run":
                continue
            with self.subTest(section=title):
                self.assertEqual(len(lines), 1, lines)
                self.assertTrue(lines[0].startswith("Skipped in this run: no "), lines[0])

    def test_skip_reason_from_the_summary(self):
        with tempfile.TemporaryDirectory() as logs:
            with open(os.path.join(logs, "summary.txt"), "w") as f:
                f.write("gemm       skipped (SKIP_GEMM_BENCH)\nbnb-interop not run: no torch (no summary)\n")
            parts = sections(bm.render(logs, "abc1234", "2030-01-02"))
        self.assertEqual(parts["Matmul against cuBLAS (`lowbit bench gemm`)"],
                         ["Skipped in this run: no bench-gemm.csv in its logs (gpu-check: skipped (SKIP_GEMM_BENCH))."])
        self.assertIn("not run: no torch", parts["bitsandbytes interchange"][0])


    def test_summary_lines_without_the_csv(self):
        with tempfile.TemporaryDirectory() as logs:
            with open(os.path.join(logs, "bench-gemm.log"), "w") as f:
                f.write("  4096x4096 int4:g128 ...\n"
                        "summary: int4:g128 speedup over cuBLAS (geomean over shapes): M=1 2.50x\n")
            gemm = sections(bm.render(logs, "abc1234", "2030-01-02"))["Matmul against cuBLAS (`lowbit bench gemm`)"]
        self.assertIn("No CSV; its summary lines:", gemm[0])
        self.assertEqual(gemm[1:], ["```", "int4:g128 speedup over cuBLAS (geomean over shapes): M=1 2.50x", "```"])


class Archive(unittest.TestCase):
    def test_logs_read_from_the_archive(self):
        with tempfile.TemporaryDirectory() as logs:
            with tarfile.open(os.path.join(logs, "logs.tar.gz"), "w:gz") as tar:
                for name in sorted(os.listdir(FIXTURE)):
                    if name != "summary.txt":
                        tar.add(os.path.join(FIXTURE, name), arcname=name)
            with open(os.path.join(FIXTURE, "summary.txt")) as src, open(os.path.join(logs, "summary.txt"), "w") as dst:
                dst.write(src.read())
            self.assertEqual(bm.render(logs, "abc1234", "2030-01-02"), bm.render(FIXTURE, "abc1234", "2030-01-02"))


class CommandLine(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, check=False)

    def test_prints_the_document(self):
        p = self.run_script(FIXTURE, "--commit", "abc1234", "--date", "2030-01-02")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, bm.render(FIXTURE, "abc1234", "2030-01-02"))

    def test_not_a_folder(self):
        p = self.run_script(os.path.join(FIXTURE, "nonexistent"), "--commit", "x", "--date", "y")
        self.assertEqual(p.returncode, 2)
        self.assertIn("logs must be a folder", p.stderr)

    def test_commit_and_date_required(self):
        self.assertEqual(self.run_script(FIXTURE).returncode, 2)


if __name__ == "__main__":
    unittest.main()
