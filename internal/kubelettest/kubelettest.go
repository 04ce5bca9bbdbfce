// Package kubelettest serves the kubelet's PodResources API for tests: a
// real gRPC server with the kubelet's generated types on a unix socket, as
// the podresources collector meets it on a node.
package kubelettest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Kubelet answers List with Resp after Delay (a slow kubelet when set),
// and GetAllocatableResources with Allocatable, or Unimplemented when it
// is nil (a kubelet before 1.23).
type Kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Resp        *podresourcesv1.ListPodResourcesResponse
	Allocatable *podresourcesv1.AllocatableResourcesResponse
	Delay       time.Duration
}

// GetAllocatableResources answers Allocatable.
func (k *Kubelet) GetAllocatableResources(ctx context.Context, r *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	if k.Allocatable == nil {
		return k.UnimplementedPodResourcesListerServer.GetAllocatableResources(ctx, r)
	}
	return k.Allocatable, nil
}

// List answers the pods' assignments, or the caller's deadline first.
func (k *Kubelet) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	select {
	case <-time.After(k.Delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return k.Resp, nil
}

// Serve listens on socket and serves k until the test ends or stop is
// called.
func Serve(t testing.TB, socket string, k *Kubelet) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, k)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return s.Stop
}

// Pod is an answer naming one pod whose container holds the devices.
func Pod(namespace, name, container string, deviceIDs ...string) *podresourcesv1.ListPodResourcesResponse {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Name: name, Namespace: namespace,
		Containers: []*podresourcesv1.ContainerResources{{Name: container, Devices: []*podresourcesv1.ContainerDevices{
			{ResourceName: "nvidia.com/gpu", DeviceIds: deviceIDs}}}}}}}
}

// SocketDir is a directory for sockets whose paths fit sun_path (108
// bytes), which t.TempDir's may not; it is removed when the test ends.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
