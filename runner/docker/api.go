package docker

import (
	"context"

	"github.com/moby/moby/client"
)

// dockerAPI is the part of the Docker client (github.com/moby/moby/client,
// the continuation of github.com/docker/docker/client) the runner uses;
// unit tests substitute a fake. *client.Client implements it. The client
// negotiates the API version down to the daemon's (1.41 for Debian 12's
// dockerd 20.10; its minimum is 1.40).
type dockerAPI interface {
	Info(ctx context.Context, options client.InfoOptions) (client.SystemInfoResult, error)
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, containerID string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerInspect(ctx context.Context, containerID string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerLogs(ctx context.Context, containerID string, options client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ContainerStats(ctx context.Context, containerID string, options client.ContainerStatsOptions) (client.ContainerStatsResult, error)
	ContainerRemove(ctx context.Context, containerID string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerKill(ctx context.Context, containerID string, options client.ContainerKillOptions) (client.ContainerKillResult, error)
	Close() error
}

var _ dockerAPI = (*client.Client)(nil)
