// Command publish-slices publishes ResourceSlices the way a DRA driver does, without a kubelet:
// through the resourceslice controller that kubeletplugin.PublishResources starts (owner the
// Node, pool names, generations and the order of its writes are the controller's own). The
// end-to-end tests feed it drivers' slice shapes from a description file; SIGHUP re-reads the
// file and republishes, SIGTERM stops. With -hold-writes each write waits for a line on stdin,
// so a test can look at the cluster between two writes of a rollout.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"sigs.k8s.io/yaml"
)

// maxDescription bounds what is read: a description is a few pools, not an inventory.
const maxDescription = 4 << 20

// description is the file: a driver and, per Node, the pools it publishes there, in the
// controller's own types, so any field a driver sets on a slice or a device is accepted.
type description struct {
	Driver string                                   `json:"driver"`
	Nodes  map[string]resourceslice.DriverResources `json:"nodes"`
}

func read(path string) (*description, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxDescription+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxDescription {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxDescription)
	}
	var wanted description
	if err := yaml.UnmarshalStrict(data, &wanted); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if wanted.Driver == "" {
		return nil, fmt.Errorf("%s: no driver", path)
	}
	return &wanted, nil
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "publish-slices: "+format+"\n", args...)
}

// published is the version of the description the controllers were last given. It is raised
// under the lock with the Update calls, so the version a worker reads once it has a pool is the
// one its sync reads, or an older one while Update queues the pool again.
type published struct {
	sync.RWMutex
	version int64
}

// reporting is the controller's queue, saying when a pool's sync has succeeded (the controller
// forgets a pool only then) and which published version it saw. The controller has one worker.
type reporting struct {
	workqueue.TypedRateLimitingInterface[string]
	node      string
	published *published
	seen      map[string]int64
}

func (q *reporting) Get() (string, bool) {
	pool, shutdown := q.TypedRateLimitingInterface.Get()
	q.published.RLock()
	version := q.published.version
	q.published.RUnlock()
	q.seen[pool] = version
	return pool, shutdown
}

func (q *reporting) Forget(pool string) {
	say("synced node=%s pool=%s version=%d", q.node, pool, q.seen[pool])
	q.TypedRateLimitingInterface.Forget(pool)
}

// holding makes every write wait for a line on stdin, one write at a time: the next is held
// only once the last has been answered. Reads go through at once.
type holding struct {
	next     http.RoundTripper
	releases <-chan struct{}
	mutex    *sync.Mutex
}

func (h holding) RoundTrip(request *http.Request) (*http.Response, error) {
	if request.Method != http.MethodGet {
		h.mutex.Lock()
		defer h.mutex.Unlock()
		say("holding %s %s", request.Method, request.URL.Path)
		select {
		case <-h.releases:
		case <-request.Context().Done():
			return nil, request.Context().Err()
		}
	}
	return h.next.RoundTrip(request)
}

func run(ctx context.Context, kubeconfig, path string, hold bool) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	if hold {
		releases := make(chan struct{})
		go func() {
			lines := bufio.NewScanner(os.Stdin)
			for lines.Scan() {
				releases <- struct{}{}
			}
		}()
		var mutex sync.Mutex
		config.Wrap(func(next http.RoundTripper) http.RoundTripper {
			return holding{next, releases, &mutex}
		})
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	wanted, err := read(path)
	if err != nil {
		return err
	}
	driver := wanted.Driver
	hangup := make(chan os.Signal, 1)
	signal.Notify(hangup, syscall.SIGHUP)
	var current published
	controllers := map[string]*resourceslice.Controller{}
	defer func() {
		for _, controller := range controllers {
			controller.Stop()
		}
	}()
	for {
		for node := range wanted.Nodes {
			if controllers[node] != nil {
				continue
			}
			queue := workqueue.NewTypedRateLimitingQueueWithConfig(
				workqueue.DefaultTypedControllerRateLimiter[string](),
				workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_resource_slices"},
			)
			controller, err := resourceslice.StartController(ctx, resourceslice.Options{
				DriverName: driver,
				KubeClient: client,
				Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
				Queue:      &reporting{TypedRateLimitingInterface: queue, node: node, published: &current, seen: map[string]int64{}},
				ErrorHandler: func(_ context.Context, err error, msg string) {
					say("error node=%s: %s: %v", node, msg, err)
				},
			})
			if err != nil {
				return fmt.Errorf("node %s: %w", node, err)
			}
			controllers[node] = controller
		}
		current.Lock()
		for node, controller := range controllers {
			resources := wanted.Nodes[node] // a Node left out: its pools are removed
			controller.Update(&resources)
		}
		current.version++
		version := current.version
		current.Unlock()
		say("published version=%d", version)
		for wanted = nil; wanted == nil; {
			select {
			case <-ctx.Done():
				say("stopping")
				return nil
			case <-hangup:
				if wanted, err = read(path); err != nil {
					say("error: %v; still publishing version=%d", err, version)
				} else if wanted.Driver != driver {
					say("error: driver %s is not %s; still publishing version=%d", wanted.Driver, driver, version)
					wanted = nil
				}
			}
		}
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the identity publishing the slices")
	path := flag.String("description", "", "YAML or JSON: driver, and per Node the pools")
	hold := flag.Bool("hold-writes", false, "make each write wait for a line on stdin")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *kubeconfig, *path, *hold); err != nil {
		say("error: %v", err)
		os.Exit(1)
	}
}
