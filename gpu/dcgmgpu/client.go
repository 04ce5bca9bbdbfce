package dcgmgpu

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
)

// client is the part of go-dcgm the backend uses. It exists so that tests can
// feed canned readings without libdcgm; liveClient forwards to go-dcgm.
type client interface {
	SupportedGPUs() ([]uint, error)
	DeviceInfo(gpu uint) (dcgm.Device, error)
	GPUStatus(gpu uint) dcgm.EntityStatus
	NvLinkStatus() ([]dcgm.NvLinkStatus, error)

	CreateGroup(name string, gpus []uint) (dcgm.GroupHandle, error)
	DestroyGroup(g dcgm.GroupHandle) error
	CreateFieldGroup(name string, fields []dcgm.Short) (dcgm.FieldHandle, error)
	DestroyFieldGroup(f dcgm.FieldHandle) error
	// Watch starts DCGM's background sampling of the fields and waits for
	// the first update.
	Watch(f dcgm.FieldHandle, g dcgm.GroupHandle, every, keepAge time.Duration) error
	Unwatch(f dcgm.FieldHandle, g dcgm.GroupHandle) error

	// Latest returns the newest cached value of every field for every GPU,
	// in no particular order.
	Latest(gpus []uint, fields []dcgm.Short) ([]value, error)

	Shutdown() error
}

// value is one field reading, decoded from go-dcgm's 4 KiB value union so
// that the mapping code (and its tests) deal in plain numbers.
type value struct {
	gpu    uint
	field  dcgm.Short
	status int // dcgmReturn_t of this value; DCGM_ST_OK when read
	ts     int64
	kind   uint // dcgm.DCGM_FT_*
	i      int64
	f      float64
	s      string
}

// liveClient calls go-dcgm, which keeps one process-wide connection: only one
// liveClient may exist at a time.
type liveClient struct{}

// connect loads libdcgm.so.4 and starts DCGM embedded, or connects to the
// hostengine at address.
func connect(address string) (client, error) {
	var err error
	if address == "" {
		_, err = dcgm.Init(dcgm.Embedded)
	} else {
		_, err = dcgm.Init(dcgm.Standalone, standaloneArgs(address)...)
	}
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "libdcgm.so.4 not found"):
			return nil, errors.New("DCGM: libdcgm.so.4 not found (DCGM 4 is not installed)")
		case address == "":
			return nil, fmt.Errorf("DCGM: cannot start embedded hostengine: %s", trimDCGMPrefix(msg))
		default:
			return nil, fmt.Errorf("DCGM: cannot connect to hostengine at %s: %s", address, trimDCGMPrefix(msg))
		}
	}
	return liveClient{}, nil
}

// standaloneArgs turns an address into go-dcgm's Standalone arguments. Unix
// sockets go through dcgmConnect_v2 (address, "1") rather than a unix://
// connection string, which needs dcgmConnect_v3 and so DCGM 4.5 or newer.
func standaloneArgs(address string) []string {
	lower := strings.ToLower(address)
	switch {
	case strings.HasPrefix(lower, "unix://"):
		return []string{address[len("unix://"):], "1"}
	case strings.HasPrefix(address, "/"):
		return []string{address, "1"}
	case strings.HasPrefix(lower, "tcp://"):
		return []string{address[len("tcp://"):], "0"}
	case strings.Contains(lower, "://"): // vsock:// and whatever newer DCGM accepts
		return []string{address}
	default:
		return []string{address, "0"}
	}
}

// trimDCGMPrefix drops go-dcgm's generic prefixes so that errors read
// "DCGM: cannot connect to hostengine at X: <reason>" once, not twice.
func trimDCGMPrefix(msg string) string {
	for _, p := range []string{"error connecting to nv-hostengine: ", "error starting nv-hostengine: ", "error initializing DCGM: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

func (liveClient) SupportedGPUs() ([]uint, error)           { return dcgm.GetSupportedDevices() }
func (liveClient) DeviceInfo(gpu uint) (dcgm.Device, error) { return dcgm.GetDeviceInfo(gpu) }
func (liveClient) GPUStatus(gpu uint) dcgm.EntityStatus     { return dcgm.GetGPUStatus(gpu) }
func (liveClient) NvLinkStatus() ([]dcgm.NvLinkStatus, error) {
	return dcgm.GetNvLinkLinkStatus()
}

func (liveClient) CreateGroup(name string, gpus []uint) (dcgm.GroupHandle, error) {
	g, err := dcgm.CreateGroup(name)
	if err != nil {
		return g, err
	}
	for _, id := range gpus {
		if err := dcgm.AddToGroup(g, id); err != nil {
			_ = dcgm.DestroyGroup(g)
			return dcgm.GroupHandle{}, err
		}
	}
	return g, nil
}

func (liveClient) DestroyGroup(g dcgm.GroupHandle) error { return dcgm.DestroyGroup(g) }

func (liveClient) CreateFieldGroup(name string, fields []dcgm.Short) (dcgm.FieldHandle, error) {
	return dcgm.FieldGroupCreate(name, fields)
}

func (liveClient) DestroyFieldGroup(f dcgm.FieldHandle) error { return dcgm.FieldGroupDestroy(f) }

func (liveClient) Watch(f dcgm.FieldHandle, g dcgm.GroupHandle, every, keepAge time.Duration) error {
	// maxKeepSamples 0: the cache is bounded by age alone.
	return dcgm.WatchFieldsWithGroupEx(f, g, every.Microseconds(), keepAge.Seconds(), 0)
}

func (liveClient) Unwatch(f dcgm.FieldHandle, g dcgm.GroupHandle) error {
	return dcgm.UnwatchFields(f, g)
}

func (liveClient) Latest(gpus []uint, fields []dcgm.Short) ([]value, error) {
	entities := make([]dcgm.GroupEntityPair, len(gpus))
	for i, id := range gpus {
		entities[i] = dcgm.GroupEntityPair{EntityGroupId: dcgm.FE_GPU, EntityId: id}
	}
	fvs, err := dcgm.EntitiesGetLatestValues(entities, fields, 0)
	if err != nil {
		return nil, err
	}
	out := make([]value, 0, len(fvs))
	for i := range fvs {
		fv := &fvs[i]
		if fv.EntityGroupId != dcgm.FE_GPU {
			continue
		}
		v := value{gpu: fv.EntityID, field: fv.FieldID, status: fv.Status, ts: fv.TS, kind: fv.FieldType}
		switch fv.FieldType {
		case dcgm.DCGM_FT_DOUBLE:
			v.f = fv.Float64()
		case dcgm.DCGM_FT_INT64, dcgm.DCGM_FT_TIMESTAMP:
			v.i = fv.Int64()
		case dcgm.DCGM_FT_STRING:
			if fv.StringValue != nil {
				v.s = *fv.StringValue
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (liveClient) Shutdown() error { return dcgm.Shutdown() }
