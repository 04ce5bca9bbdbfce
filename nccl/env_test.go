package nccl

import (
	"strings"
	"testing"
)

func TestEnvPolicy(t *testing.T) {
	for name, want := range map[string]EnvKeep{
		"NCCL_P2P_DISABLE": EnvValue, "NCCL_DEBUG_FILE": EnvValue, "NCCL_SOCKET_IFNAME": EnvValue,
		"NCCL_NET_GDR_LEVEL": EnvValue, "NCCL_IB_HCA": EnvValue, "NCCL_ASYNC_ERROR_HANDLING": EnvValue,
		"UCX_TLS": EnvValue, "TORCH_NCCL_BLOCKING_WAIT": EnvValue, "CUDA_VISIBLE_DEVICES": EnvValue,
		"SLURM_JOB_ID": EnvValue, "RANK": EnvValue, "NVIDIA_REQUIRE_CUDA": EnvValue, "CUDA_VERSION": EnvValue,
		"GOMP_CPU_AFFINITY": EnvValue,
		// HPC-X's IB plugin settings, as NCCL echoes them.
		"NCCL_IBEXT_DISABLE": EnvValue, "NCCL_PLUGIN_P2P": EnvValue,
		// Unknown members of the families keep their names only.
		"NCCL_SECRET_TOKEN": EnvNameOnly, "NCCL_X": EnvNameOnly, "UCX_PASSWORD": EnvNameOnly,
		"TORCH_NCCL_API_KEY": EnvNameOnly,
		// Everything else is dropped.
		"NCCL_": EnvDrop, "NCCL": EnvDrop, "nccl_p2p_disable": EnvDrop, "AWS_SECRET_ACCESS_KEY": EnvDrop,
		"HF_TOKEN": EnvDrop, "PATH": EnvDrop, "MASTER_ADDR": EnvDrop, "XNCCL_P2P_DISABLE": EnvDrop,
		"TORCH_HOME": EnvDrop, "SLURM_JOB_ACCOUNT": EnvDrop, "": EnvDrop,
	} {
		if got := EnvPolicy([]byte(name)); got != want {
			t.Errorf("EnvPolicy(%q) = %d; want %d", name, got, want)
		}
	}
}

func TestSecretShaped(t *testing.T) {
	for _, v := range []string{
		"AKIAIOSFODNN7EXAMPLE",                      // AWS access key ID
		"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY0", // AWS secret: a base64 run of mixed case and digits
		"ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",  // GitHub token
		"hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",   // Hugging Face token
		"hunter2-0f1e2d3c4b5a69788796a5b4",          // hex after a prefix
		"https://user:pa55word@registry.example.com/x",
		"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlMTIzNDU2Nzg5MA",
	} {
		if !SecretShaped(v) {
			t.Errorf("SecretShaped(%q) = false", v)
		}
	}
	for _, v := range []string{
		"", "1", "eth0,eth1", "^docker0,lo", "mlx5_0:1,mlx5_1:1", "Ring,Tree", "LL128", "SYS", "PHB",
		"/tmp/nccl.%h.%p", "/tmp/TestNCCLProcAttackDebugFileFIFO1311269687/001/nccl.log", "/scratch/jobs/run_20261125_sweep_lr3e-4/nccl_debug.%h.%p.log",
		"GPU-5d3f8e2a-1c4b-4e6f-9a7d-2b8c0e4f6a1d,GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
		"MIG-GPU-5d3f8e2a-1c4b-4e6f-9a7d-2b8c0e4f6a1d/1/0", "0,1,2,3,4,5,6,7", "4194304",
		"https://registry.example.com/x", "10.0.0.1:29500", "INIT,NET", "/opt/hpcx/nccl_rdma_sharp_plugin/lib",
	} {
		if SecretShaped(v) {
			t.Errorf("SecretShaped(%q) = true", v)
		}
	}
}

func TestRedactText(t *testing.T) {
	for in, want := range map[string]string{
		"NCCL_SECRET_TOKEN set by environment to abc":            "NCCL_SECRET_TOKEN set by environment to " + Redacted,
		"AWS_SECRET_ACCESS_KEY set by environment to abc":        Redacted + " set by environment to " + Redacted,
		"NCCL_P2P_LEVEL set by environment to NVL":               "NCCL_P2P_LEVEL set by environment to NVL",
		"Invalid value HF_TOKEN=hf_x for the plugin":             "Invalid value " + Redacted + " for the plugin",
		"DB_PASSWORD_39133707=x refused":                         Redacted + " refused",
		"bad NCCL_FOO=bar":                                       "bad NCCL_FOO=" + Redacted,
		"bad NCCL_IB_HCA=mlx5_0 given":                           "bad NCCL_IB_HCA=mlx5_0 given",
		"connect to 10.0.0.1<45123> failed : Connection refused": "connect to 10.0.0.1<45123> failed : Connection refused",
		"token AKIAIOSFODNN7EXAMPLE rejected":                    "token " + Redacted + " rejected",
	} {
		if got := RedactText(in); got != want {
			t.Errorf("RedactText(%q) = %q; want %q", in, got, want)
		}
	}
}

// A log that echoes secrets through NCCL's own lines keeps none of them:
// "set by environment" for names off the allow-list, and warnings quoting
// them.
func TestLogKeepsNoSecret(t *testing.T) {
	const secret = "s3cr3tV4lu3AbCdEfGhIjKl"
	lines := []string{
		"node1:4242:4242 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
		"node1:4242:4242 [0] NCCL INFO NCCL_SECRET_TOKEN set by environment to " + secret,
		"node1:4242:4242 [0] NCCL INFO AWS_SECRET_ACCESS_KEY set by environment to " + secret,
		"node1:4242:4242 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to " + secret,
		"node1:4242:4242 [0] NCCL WARN could not use HF_TOKEN=" + secret + " here",
		"node1:4242:4242 [0] NCCL WARN key " + secret + " refused",
	}
	l := NewLog()
	for _, line := range lines {
		l.Feed([]byte(line))
	}
	var all strings.Builder
	for _, s := range l.Summaries() {
		for _, e := range s.Env {
			all.WriteString(e.Name + "=" + e.Value + "\n")
		}
		for _, w := range s.Warnings {
			all.WriteString(w.Message + "\n")
		}
	}
	got := all.String()
	if strings.Contains(got, secret) || strings.Contains(got, "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("a secret was kept:\n%s", got)
	}
	for _, want := range []string{"NCCL_P2P_DISABLE=1", "NCCL_SECRET_TOKEN=" + Redacted, "NCCL_SOCKET_IFNAME=" + Redacted} {
		if !strings.Contains(got, want) {
			t.Errorf("%q missing from what was kept:\n%s", want, got)
		}
	}
}

// A job identity variable keeps its value only in its scheduler's format,
// wherever it is read (the NCCL log's echo included); "none" and empty
// values are kept as no identity.
func TestKeepEnvRefusesForeignJobIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		keep        bool
	}{
		{"SLURM_JOB_ID", "8812", true},
		{"SLURM_JOB_ID", "\x1b]0;owned\x07", false},
		{"TORCHELASTIC_RUN_ID", "none", true},
		{"TORCHELASTIC_RUN_ID", "3f2b1c9e-8d7a-4e6f-9b0c-1a2d3e4f5a6b", true},
		{"TORCHELASTIC_RUN_ID", strings.Repeat("x", 100_000), false},
	} {
		v, ok := KeepEnv(tc.name, tc.value)
		if ok != tc.keep || ok && v != tc.value {
			t.Errorf("KeepEnv(%s, %.20q) = %.20q, %v; want kept %v", tc.name, tc.value, v, ok, tc.keep)
		}
	}
}
