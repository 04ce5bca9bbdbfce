package nccl

import (
	"strings"

	"github.com/gpudiag/gpudiag/sample"
)

// A job's environment holds its tokens and passwords next to its NCCL
// settings, and NCCL echoes variables into its log ("<NAME> set by
// environment to <value>"). One rule decides what of a variable gpudiag
// keeps, wherever it was read (a process's environ, an NCCL log) and so in
// every output made from it (samples, recorded traces, metrics, /diagnose,
// logs):
//
//   - a name on the exact allow-list (every documented NCCL setting, a few
//     UCX and PyTorch NCCL settings, the variables that say which GPUs a
//     process sees and place it in its job) keeps its value, unless the
//     value looks like a secret (SecretShaped); a job identity
//     (SLURM_JOB_ID, TORCHELASTIC_RUN_ID) keeps it only in its scheduler's
//     format (sample.ValidJobIdentity), and is dropped otherwise;
//   - any other NCCL_*, UCX_* or TORCH_NCCL_* name keeps its name, with the
//     value replaced by Redacted: that an unknown NCCL variable was set is
//     worth knowing, its value is not ours to read;
//   - every other variable is dropped.

// Redacted stands in for a value that is not kept.
const Redacted = "<redacted>"

// EnvKeep is what of an environment variable may be kept.
type EnvKeep int

const (
	EnvDrop     EnvKeep = iota // neither name nor value
	EnvNameOnly                // the name, the value as Redacted
	EnvValue                   // name and value (values that look like secrets still become Redacted)
)

// envNamePrefixes are the families whose unknown members keep their name.
var envNamePrefixes = []string{"NCCL_", "UCX_", "TORCH_NCCL_"}

// otherSettings are the allow-listed names outside NCCL's own.
var otherSettings = names(
	// Which GPUs a process sees, and settings that change how it drives them.
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS",
	"CUDA_LAUNCH_BLOCKING", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "OMP_NUM_THREADS",
	// libgomp's OpenMP thread pinning, a CPU list: checked against the
	// CPUs local to the process's GPU (omp_affinity_remote).
	"GOMP_CPU_AFFINITY",
	// The CUDA version a container was built for (NVIDIA's CUDA images set
	// both): checked against the driver's (driver_cuda_too_old).
	"NVIDIA_REQUIRE_CUDA", "CUDA_VERSION",
	// Where the process sits in its job (torchrun, Slurm).
	"LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID",
	// torchrun's rendezvous ID: the same on every node of one job, the
	// job identity where no scheduler gives one.
	"TORCHELASTIC_RUN_ID",
	// PyTorch's distributed and NCCL settings (torch.distributed docs).
	"TORCH_DISTRIBUTED_DEBUG",
	"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_DUMP_ON_TIMEOUT",
	"TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_NCCL_TRACE_BUFFER_SIZE",
	"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DESYNC_DEBUG", "TORCH_NCCL_ENABLE_TIMING",
	"TORCH_NCCL_AVOID_RECORD_STREAMS", "TORCH_NCCL_USE_COMM_NONBLOCKING", "TORCH_NCCL_HIGH_PRIORITY",
	"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "TORCH_NCCL_COORD_CHECK_MILSEC", "TORCH_NCCL_NAN_CHECK",
	"TORCH_NCCL_CUDA_EVENT_CACHE", "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN",
	"TORCH_NCCL_ABORT_IN_DESTROY_PG", "TORCH_NCCL_RETHROW_CUDA_ERRORS", "TORCH_NCCL_PROPAGATE_ERROR",
	"TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "TORCH_NCCL_TRACE_CPP_STACK",
	// NVIDIA HPC-X's NCCL network plugin (nccl-rdma-sharp-plugins, the
	// "IBext" network), documented in the HPC-X manual: NCCL_IBEXT_DISABLE
	// turns the plugin off (NCCL's own IB then), NCCL_PLUGIN_P2P picks its
	// transport (ib, ucx, ucx_uct, ucx_uct_read). Not NCCL's own names, so
	// not in ncclSettings.
	"NCCL_IBEXT_DISABLE", "NCCL_PLUGIN_P2P",
	// UCX transport settings (UCX's documented variables NCCL users set).
	"UCX_TLS", "UCX_NET_DEVICES", "UCX_IB_GPU_DIRECT_RDMA", "UCX_RNDV_SCHEME", "UCX_RNDV_THRESH",
	"UCX_MEMTYPE_CACHE", "UCX_IB_PCI_RELAXED_ORDERING", "UCX_MAX_RNDV_RAILS", "UCX_IB_REG_METHODS",
	"UCX_CUDA_COPY_DMABUF", "UCX_LOG_LEVEL", "UCX_SOCKADDR_TLS_PRIORITY", "UCX_IB_SL",
	"UCX_IB_TRAFFIC_CLASS", "UCX_IB_GID_INDEX", "UCX_RC_TIMEOUT", "UCX_PROTO_ENABLE", "UCX_ZCOPY_THRESH",
	"UCX_IB_NUM_PATHS", "UCX_RNDV_FRAG_MEM_TYPE", "UCX_WARN_UNUSED_ENV_VARS",
)

func names(list ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(list))
	for _, n := range list {
		m[n] = struct{}{}
	}
	return m
}

// EnvPolicy says what of the variable name may be kept. It takes bytes so
// that an environ scan asks without copying names it drops (the map lookup
// of string(name) does not allocate).
func EnvPolicy(name []byte) EnvKeep {
	if _, ok := ncclSettings[string(name)]; ok {
		return EnvValue
	}
	if _, ok := otherSettings[string(name)]; ok {
		return EnvValue
	}
	for _, p := range envNamePrefixes {
		if len(name) > len(p) && string(name[:len(p)]) == p {
			return EnvNameOnly
		}
	}
	return EnvDrop
}

// KeepEnv applies the rule to one variable: the value to keep, and whether
// the variable is kept at all.
func KeepEnv(name, value string) (kept string, ok bool) {
	switch EnvPolicy([]byte(name)) {
	case EnvValue:
		if JobIdentityVar(name) && !sample.NoJobIdentity(name, value) && !sample.ValidJobIdentity(name, value) {
			return "", false
		}
		if SecretShaped(value) {
			return Redacted, true
		}
		return value, true
	case EnvNameOnly:
		return Redacted, true
	}
	return "", false
}

// JobIdentityVar is whether the variable names the process's job: its value
// becomes the job_id label and /diagnose's text.
func JobIdentityVar(name string) bool {
	return name == sample.SlurmJobIDVar || name == sample.TorchrunRunIDVar
}

// secretRunBytes is the shortest run of letters, digits, '+' and '=' with
// both letters and digits that counts as a credential: an AWS access key
// ID is 20, GitHub, Hugging Face and most API tokens are longer. '_', '-',
// '.' and '/' end such a run so that paths, interface names, GPU UUIDs and
// "a_b_c" identifiers are not mistaken for one.
const secretRunBytes = 20

// base64RunBytes is the shortest run that also spans '/' (standard base64,
// e.g. an AWS secret access key: 40 bytes) and counts as a credential when
// it mixes upper case, lower case and digits, which paths rarely do at
// that length without a '_', '-' or '.'.
const base64RunBytes = 30

// SecretShaped is whether a value looks like a credential even though its
// name is allowed: a URL with a password, or a long run of letters mixed
// with digits. It is a second line behind the allow-list, not a detector.
// An absolute path is not judged by its shape: the allowed variables that
// hold paths (NCCL_DEBUG_FILE, NCCL_TOPO_FILE) name files, whose names are
// often long runs of letters and digits (job and temporary directories),
// and the daemon needs NCCL_DEBUG_FILE whole to find the job's log.
func SecretShaped(v string) bool {
	if strings.HasPrefix(v, "/") {
		return false
	}
	if i := strings.Index(v, "://"); i >= 0 {
		rest := v[i+3:]
		if at := strings.IndexByte(rest, '@'); at >= 0 && strings.ContainsRune(rest[:at], ':') {
			return true
		}
	}
	var word, b64 charRun
	for i := 0; i <= len(v); i++ {
		c := byte(0)
		if i < len(v) {
			c = v[i]
		}
		if c == '/' {
			if word.secret(secretRunBytes) {
				return true
			}
			word = charRun{}
			b64.n++
			continue
		}
		if !word.add(c) {
			if word.secret(secretRunBytes) {
				return true
			}
			word = charRun{}
		}
		if !b64.add(c) {
			if b64.n >= base64RunBytes && b64.upper && b64.lower && b64.digits {
				return true
			}
			b64 = charRun{}
		}
	}
	return false
}

// charRun tracks a run of letters, digits, '+' and '='.
type charRun struct {
	n                    int
	upper, lower, digits bool
}

// add extends the run with c, or reports that c ends it.
func (r *charRun) add(c byte) bool {
	switch {
	case c >= '0' && c <= '9':
		r.digits = true
	case c >= 'a' && c <= 'z':
		r.lower = true
	case c >= 'A' && c <= 'Z':
		r.upper = true
	case c == '+' || c == '=':
	default:
		return false
	}
	r.n++
	return true
}

func (r *charRun) secret(minBytes int) bool {
	return r.n >= minBytes && r.digits && (r.upper || r.lower)
}

// RedactText removes what the rule does not keep from free text NCCL wrote
// (warnings, notes): every NAME=value and "NAME set by environment to
// value" keeps what KeepEnv keeps of it (a dropped variable loses its name
// too, an unknown NCCL variable its value), and every secret-shaped word
// goes. Text is kept word by word otherwise, so a warning stays readable.
func RedactText(s string) string {
	if s == "" {
		return s
	}
	if before, value, ok := strings.Cut(s, " set by environment to "); ok {
		fields := strings.Fields(before)
		if len(fields) > 0 {
			name := fields[len(fields)-1]
			value = strings.TrimSpace(value)
			kept, keep := KeepEnv(name, value)
			switch {
			case !keep:
				return RedactText(strings.TrimSuffix(before, name)+Redacted) + " set by environment to " + Redacted
			case kept != value:
				return RedactText(before) + " set by environment to " + Redacted
			}
		}
	}
	words := strings.Split(s, " ")
	changed := false
	for i, w := range words {
		if name, value, ok := strings.Cut(w, "="); ok && isEnvNameText(name) {
			kept, keep := KeepEnv(name, value)
			switch {
			case !keep:
				words[i], changed = Redacted, true
				continue
			case kept != value:
				words[i], changed = name+"="+Redacted, true
				continue
			}
		}
		if SecretShaped(w) {
			words[i], changed = Redacted, true
		}
	}
	if !changed {
		return s
	}
	return strings.Join(words, " ")
}

// isEnvNameText is whether s is shaped like an environment variable name.
func isEnvNameText(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
