package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ufp-dev/ufp/internal/testenv"
)

// Version is the Kubernetes release whose kube-apiserver the tests run:
// tools/kube/go.mod's k8s.io/kubernetes (a test checks that they agree).
const Version = "v1.37.2"

// Service address ranges of the API server: the IPv4 one holds 65,534
// Services; an IPv6 secondary range of a dual-stack cluster may have at
// most 20 bits of host part, so /108.
const (
	ServiceCIDR4 = "10.96.0.0/16"
	ServiceCIDR6 = "fd00:96::/108"
)

// Limits of a start: a slow CI machine under load is given plenty, and a
// process that exits is noticed at once.
const (
	readyTimeout = 90 * time.Second // from exec to /readyz answering ok
	stopGrace    = 10 * time.Second // from SIGTERM to SIGKILL
	startTries   = 3                // a port taken between choosing and binding costs a try
)

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $UFP_KUBE_ASSETS, or /var/cache/ufp-kube/Version (tools/build-kube's
// default).
func AssetsDir() string {
	if d := os.Getenv("UFP_KUBE_ASSETS"); d != "" {
		return d
	}
	return filepath.Join("/var/cache/ufp-kube", Version)
}

// NeedAssets skips t (or, with CI=true, fails it) unless kube-apiserver
// and etcd are in AssetsDir, naming tools/build-kube, which builds them.
func NeedAssets(t testing.TB) {
	t.Helper()
	if err := checkAssets(AssetsDir()); err != nil {
		why := fmt.Sprintf("needs kube-apiserver and etcd %s: %v (run tools/build-kube; about 10 minutes the first time)", Version, err)
		if testenv.CI() {
			t.Fatal(why + "; CI=true, so this is a failure, not a skip (.ci/run builds them)")
		}
		t.Skip(why)
	}
}

// checkAssets reports what dir lacks of the two binaries.
func checkAssets(dir string) error {
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s missing in %s", strings.Join(missing, " and "), dir)
	}
	return nil
}

// Cluster is a running etcd and kube-apiserver. Its fields are read-only;
// its methods are safe for concurrent use.
type Cluster struct {
	// Config reaches the API server as its admin (system:masters), with
	// client-side rate limiting off (QPS -1). Copy it (rest.CopyConfig)
	// before changing it.
	Config *rest.Config
	// Client is a clientset from Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file with the same
	// credentials, for programs the test runs.
	Kubeconfig string
	// Dir is the cluster's temporary directory (certificates, data,
	// logs); Stop removes it.
	Dir string

	etcd, apiserver *process
	stopOnce        sync.Once
	stopErr         error
}

// Start starts a cluster for t and stops it when t's cleanup runs. It
// skips t if the binaries are missing (NeedAssets) and fails it if the
// cluster does not start.
func Start(t testing.TB) *Cluster {
	t.Helper()
	NeedAssets(t)
	c, err := start(AssetsDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// New starts a cluster from the binaries in AssetsDir, for a program
// such as a benchmark; the caller must Stop it. Tests use Start or
// Shared.
func New() (*Cluster, error) {
	if err := CheckAssets(); err != nil {
		return nil, fmt.Errorf("kubetest: %w (run tools/build-kube)", err)
	}
	return start(AssetsDir())
}

// CheckAssets reports what AssetsDir lacks of kube-apiserver and etcd.
func CheckAssets() error { return checkAssets(AssetsDir()) }

// start starts etcd and kube-apiserver from dir, trying again on new
// ports if one of them exits before it is ready.
func start(assets string) (*Cluster, error) {
	var errs []error
	for range startTries {
		c, err := startOnce(assets)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// errExited is what a start returns when a process exits before it is
// ready, which a port taken by someone else causes.
var errExited = errors.New("exited before it was ready")

// startOnce makes the cluster's directory and secrets and starts etcd,
// then kube-apiserver, each on ports free a moment earlier.
func startOnce(assets string) (_ *Cluster, err error) {
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	sec, err := makeSecrets(dir)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.etcd, err = startProcess(dir, "etcd", filepath.Join(assets, "etcd"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		"--unsafe-no-fsync", // tests lose nothing they care about on a crash
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := waitReady(ctx, c.etcd, http.DefaultClient, etcdURL+"/health", ""); err != nil {
		return nil, err
	}
	host := "https://127.0.0.1:" + strconv.Itoa(ports[2])
	c.apiserver, err = startProcess(dir, "kube-apiserver", filepath.Join(assets, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[2]),
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--tls-cert-file="+sec.certFile,
		"--tls-private-key-file="+sec.keyFile,
		"--token-auth-file="+sec.tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+sec.saPub,
		"--service-account-signing-key-file="+sec.saKey,
		"--service-cluster-ip-range="+ServiceCIDR4+","+ServiceCIDR6,
		// On loopback the endpoint reconciler cannot publish the
		// kubernetes Service's endpoints, and the server exits.
		"--endpoint-reconciler-type=none",
		// No controller makes service account tokens here.
		"--disable-admission-plugins=ServiceAccount",
		// As kubeadm's: node components (CNI, kube-proxy, ufp's
		// DaemonSet) run privileged containers.
		"--allow-privileged=true",
	)
	if err != nil {
		return nil, err
	}
	c.Config = &rest.Config{
		Host:            host,
		BearerToken:     sec.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: sec.caPEM},
		QPS:             -1,
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitReady(ctx, c.apiserver, hc, host+"/readyz", sec.token); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if err := waitDefaultNamespace(ctx, c); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(c.Kubeconfig); err != nil {
		return nil, err
	}
	return c, nil
}

// waitDefaultNamespace waits for the API server's own controllers to
// have made the default namespace, which comes shortly after /readyz.
func waitDefaultNamespace(ctx context.Context, c *Cluster) error {
	for {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: no default namespace: %w (kube-apiserver log: %s)", err, c.apiserver.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WriteKubeconfig writes a kubeconfig file for the cluster's admin to
// path, for a program the test runs (for instance with --kubeconfig).
func (c *Cluster) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{
		Server:                   c.Config.Host,
		CertificateAuthorityData: c.Config.CAData,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.Config.BearerToken}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin"}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

// Namespace creates a namespace of a name unique to t and deletes it when
// t's cleanup runs, so tests sharing a cluster keep their objects apart.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		// No namespace controller runs, so the namespace stays
		// Terminating; its objects are the test's to remove if it
		// needs them gone.
		err := c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil {
			t.Errorf("kubetest: deleting namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// PIDs returns the process IDs of etcd and kube-apiserver.
func (c *Cluster) PIDs() (etcd, apiserver int) {
	return c.etcd.cmd.Process.Pid, c.apiserver.cmd.Process.Pid
}

// Stop stops kube-apiserver, then etcd (SIGTERM, then SIGKILL after a
// grace period), and removes the cluster's directory. Calls after the
// first return the first's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{c.apiserver, c.etcd} {
			if p != nil {
				errs = append(errs, p.stop())
			}
		}
		errs = append(errs, os.RemoveAll(c.Dir))
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// freePorts returns n distinct loopback TCP ports that were free when it
// looked.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// process is one program the cluster started, its output in a log file.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed when it has exited
	err    error         // its exit status, once exited is closed
}

// startProcess starts path with args, its standard output and error in
// dir/name.log.
func startProcess(dir, name, path string, args ...string) (*process, error) {
	log := filepath.Join(dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubetest: starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends p by its PID: SIGTERM, then SIGKILL after stopGrace.
func (p *process) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := terminate(p.cmd.Process); err != nil {
		return fmt.Errorf("kubetest: stopping %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kubetest: killing %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.exited
	return nil
}

// logTail returns the end of p's log, for an error message.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	const keep = 2000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(bytes.TrimSpace(b))
}

// waitReady polls url (with token as a bearer token, if any) until it
// answers 200, p exits or ctx ends.
func waitReady(ctx context.Context, p *process, hc *http.Client, url, token string) error {
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			return fmt.Errorf("kubetest: %s %w (%v): %s", p.name, errExited, p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %s not ready (%s): %s", p.name, last, p.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
