package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/rules"
)

// deployDir is the repository's deploy directory.
const deployDir = "../../deploy"

// k8sObjects are the manifests of deploy/kubernetes, decoded.
type k8sObjects struct {
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    []*corev1.Service
	deployments []*appsv1.Deployment
	jobs        []*batchv1.Job
	pdbs        []*policyv1.PodDisruptionBudget
}

// loadManifests decodes every document of deploy/kubernetes/*.yaml into the
// official Kubernetes API type of its kind, strictly: an unknown field, a
// wrong type or an unknown kind is an error.
func loadManifests(t *testing.T) *k8sObjects {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s/kubernetes: %v", deployDir, err)
	}
	objs := &k8sObjects{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			where := fmt.Sprintf("%s, document %d", filepath.Base(f), i+1)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj any
			want := ""
			switch head.Kind {
			case "ConfigMap":
				obj, want = &corev1.ConfigMap{}, "v1"
			case "Secret":
				obj, want = &corev1.Secret{}, "v1"
			case "Service":
				obj, want = &corev1.Service{}, "v1"
			case "Deployment":
				obj, want = &appsv1.Deployment{}, "apps/v1"
			case "Job":
				obj, want = &batchv1.Job{}, "batch/v1"
			case "PodDisruptionBudget":
				obj, want = &policyv1.PodDisruptionBudget{}, "policy/v1"
			default:
				t.Fatalf("%s: kind %q is not one the test knows", where, head.Kind)
			}
			if head.APIVersion != want {
				t.Fatalf("%s: %s with apiVersion %q, want %q", where, head.Kind, head.APIVersion, want)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s does not match the Kubernetes API: %v", where, head.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				objs.configMaps[o.Name] = o
			case *corev1.Secret:
				objs.secrets[o.Name] = o
			case *corev1.Service:
				objs.services = append(objs.services, o)
			case *appsv1.Deployment:
				objs.deployments = append(objs.deployments, o)
			case *batchv1.Job:
				objs.jobs = append(objs.jobs, o)
			case *policyv1.PodDisruptionBudget:
				objs.pdbs = append(objs.pdbs, o)
			}
		}
	}
	return objs
}

// matches reports whether selector selects labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// materialize writes the ConfigMap cm into dir as the kubelet mounts it: the
// data in a timestamped directory, a ..data link to it, and a link per key;
// called again, it swaps ..data atomically, as an update does.
func materialize(t *testing.T, dir string, cm *corev1.ConfigMap, gen int) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..2026_01_01_00_00_%02d.%d", gen, gen))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesManifests validates deploy/kubernetes against the
// Kubernetes API types (strict decoding), checks that the pieces fit
// (selectors, named ports, probes on /readyz and /healthz at the metrics
// port, mounts at the paths the configuration names, the secret, a grace
// period longer than the shutdown timeout), then runs the Job's and the
// Deployment's commands with the ConfigMaps mounted as the kubelet mounts
// them: migrate, then serve, which becomes ready on the readiness probe's
// path, and reloads by itself when the rules ConfigMap changes.
func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t)
	if len(objs.deployments) != 1 || len(objs.services) != 1 || len(objs.jobs) != 1 || len(objs.pdbs) != 1 {
		t.Fatalf("want one Deployment, Service, Job and PodDisruptionBudget; got %d, %d, %d, %d",
			len(objs.deployments), len(objs.services), len(objs.jobs), len(objs.pdbs))
	}
	d := objs.deployments[0]
	pod := d.Spec.Template
	if d.Spec.Selector == nil || !matches(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector, pod.Labels)
	}
	if !matches(objs.services[0].Spec.Selector, pod.Labels) {
		t.Errorf("the Service's selector %v does not select the Deployment's pods %v", objs.services[0].Spec.Selector, pod.Labels)
	}
	if pdb := objs.pdbs[0]; pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the PodDisruptionBudget does not select the Deployment's pods")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("the Deployment's pod has %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, sp := range objs.services[0].Spec.Ports {
		if _, ok := ports[sp.TargetPort.String()]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name", sp.Name, sp.TargetPort.String())
		}
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe: %+v, want GET %s on the metrics port", name, p, path)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")

	// The command line: serve's own flags, the configuration where the
	// config ConfigMap is mounted.
	if len(c.Args) < 3 || c.Args[0] != "serve" || c.Args[1] != "--config" {
		t.Fatalf("container args %q, want serve --config FILE …", c.Args)
	}
	mounts := map[string]string{} // mount path → volume name
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	configVolume := volumes[mounts[filepath.Dir(c.Args[2])]]
	if configVolume.ConfigMap == nil {
		t.Fatalf("%s is not in a mounted ConfigMap", c.Args[2])
	}
	cfgMap := objs.configMaps[configVolume.ConfigMap.Name]
	if cfgMap == nil || cfgMap.Data[filepath.Base(c.Args[2])] == "" {
		t.Fatalf("ConfigMap %s has no key %s", configVolume.ConfigMap.Name, filepath.Base(c.Args[2]))
	}
	if _, ok := mounts["/tmp"]; !ok || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("a read-only root file system needs a writable /tmp (statements are spooled there)")
	}
	// The secret the admin password comes from exists.
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			s := objs.secrets[e.ValueFrom.SecretKeyRef.Name]
			if s == nil || s.StringData[e.ValueFrom.SecretKeyRef.Key] == "" {
				t.Errorf("env %s: secret %s key %s is not in secret.yaml", e.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			}
		}
	}

	// Mount the ConfigMaps as the kubelet does, under a temporary root.
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	for path, vol := range mounts {
		v := volumes[vol]
		if v.ConfigMap == nil {
			continue
		}
		cm := objs.configMaps[v.ConfigMap.Name]
		if cm == nil {
			t.Fatalf("volume %s: no ConfigMap %s in the manifests", vol, v.ConfigMap.Name)
		}
		if err := os.MkdirAll(at(path), 0o755); err != nil {
			t.Fatal(err)
		}
		materialize(t, at(path), cm, 1)
	}
	// The configuration names the rules' mount: in the test's copy, under
	// the test's root.
	cfgPath := at(c.Args[2])
	cfgText := cfgMap.Data[filepath.Base(c.Args[2])]
	var keys struct {
		Rules string `json:"rules"`
	}
	if err := yaml.Unmarshal([]byte(cfgText), &keys); err != nil || !filepath.IsAbs(keys.Rules) {
		t.Fatalf("the ConfigMap's configuration: rules %q (%v), want an absolute path (a mounted ConfigMap)", keys.Rules, err)
	}
	rulesVol, ok := mounts[keys.Rules]
	if !ok || volumes[rulesVol].ConfigMap == nil {
		t.Fatalf("rules: %s is not a mounted ConfigMap", keys.Rules)
	}
	rulesCM := objs.configMaps[volumes[rulesVol].ConfigMap.Name]
	if err := os.Remove(cfgPath); err != nil { // the link; the test's copy names the test's paths
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(cfgText, keys.Rules, at(keys.Rules), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	cfg.Rules = keys.Rules // as in the pod
	set, err := rules.LoadDir(at(cfg.Rules))
	if err != nil || set.Len() == 0 {
		t.Fatalf("the rules ConfigMap, mounted: %d rules, %v", set.Len(), err)
	}
	_, port, _ := net.SplitHostPort(cfg.Metrics.Listen)
	if strconv.Itoa(int(ports["metrics"])) != port {
		t.Errorf("the metrics port %d is not metrics.listen's %s", ports["metrics"], port)
	}
	_, port, _ = net.SplitHostPort(cfg.Listen)
	if strconv.Itoa(int(ports["mysql"])) != port {
		t.Errorf("the mysql port %d is not listen's %s", ports["mysql"], port)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.Timeouts.Shutdown {
		t.Errorf("terminationGracePeriodSeconds %v is not longer than timeouts.shutdown %v", g, cfg.Timeouts.Shutdown)
	}

	// The Job, then the Deployment's command, against the test server
	// (its address for the database Service's; ports of the test's own).
	env := []string{config.AdminPasswordEnv + "=" + examplePassword} // the example admin account (setupDB)
	job := objs.jobs[0].Spec.Template.Spec.Containers[0]
	jobArgs := slices.Clone(job.Args)
	for i, a := range jobArgs {
		if a == c.Args[2] {
			jobArgs[i] = cfgPath
		}
	}
	if _, stderr, code := runCLIEnv(t, env, append(jobArgs, "--backend", testdb.Shared().Addr)...); code != 0 {
		t.Fatalf("the migrate Job's command: exit %d: %s", code, stderr)
	}
	listen, metrics := freeAddr(t), freeAddr(t)
	args := slices.Clone(c.Args)
	args[2] = cfgPath
	if i := slices.Index(args, "--watch"); i < 0 || i+1 >= len(args) {
		t.Fatalf("the Deployment does not run serve with --watch: ConfigMap changes would need a restart")
	} else {
		args[i+1] = "1s" // the test does not wait 10 s
	}
	args = append(args, "--listen", listen, "--backend", testdb.Shared().Addr, "--metrics", metrics)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr lockedWriter
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitReady := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get("http://" + metrics + c.ReadinessProbe.HTTPGet.Path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not ready on %s within 20 s\n%s", what, c.ReadinessProbe.HTTPGet.Path, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady("serve as the Deployment runs it")

	// A change of the rules ConfigMap, as the kubelet applies it.
	changed := rulesCM.DeepCopy()
	for k, v := range changed.Data {
		changed.Data[k] = strings.Replace(v, "slots: 100", "slots: 64", 1)
		if changed.Data[k] == v {
			t.Fatalf("the rule %s has no slots: 100 to change", k)
		}
	}
	materialize(t, at(cfg.Rules), changed, 2)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), `msg="reloaded rules"`) {
		if time.Now().After(deadline) {
			t.Fatalf("serve --watch did not reload the changed ConfigMap within 20 s\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "the configuration file or the rule files changed") {
		t.Errorf("the reload does not say why:\n%s", stderr.String())
	}
	waitReady("after the ConfigMap changed")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// lockedWriter collects a process's output for a test reading it meanwhile.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// exportedMetrics runs serve with rules and roll-up, sends statements
// through it, and returns the names of the samples its /metrics exports
// (histograms with their _bucket, _sum and _count).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	listen := freeAddr(t)
	schema, path := schemaConfig(t, listen)
	migrateSchema(t, path)
	p := startServe(t, "serve", "--config", path)
	metrics := p.metricsAddr(t)
	db := openProxy(t, testdb.Shared(), listen, schema)
	for range 3 {
		if _, err := db.Exec("UPDATE repos SET downloads = downloads + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT downloads FROM repos WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	// A roll-up pass that folds, so that every roll-up metric has samples.
	for deadline := time.Now().Add(15 * time.Second); scrape(t, metrics)["slotproxy_rollup_folds_total"] == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no roll-up pass folded within 15 s\n%s", p.stderr())
		}
	}
	_, body := get(t, metrics, "/metrics")
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		names[name] = true
	}
	return names
}

// metricRefs returns the metric names a PromQL expression refers to (its
// identifiers that are neither functions, keywords nor labels).
func metricRefs(expr string) []string {
	expr = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(expr, "")                // label matchers
	expr = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(expr, "")               // ranges
	expr = regexp.MustCompile(`(by|without)\s*\([^)]*\)`).ReplaceAllString(expr, "") // grouping labels
	keywords := map[string]bool{"sum": true, "rate": true, "increase": true, "histogram_quantile": true, "max": true, "min": true,
		"avg": true, "count": true, "by": true, "without": true, "and": true, "or": true, "unless": true, "on": true, "ignoring": true,
		"bool": true, "offset": true, "label_values": true, "time": true, "vector": true, "scalar": true, "clamp_min": true, "clamp_max": true, "abs": true, "irate": true, "delta": true, "deriv": true, "topk": true, "bottomk": true, "quantile": true}
	var out []string
	for _, m := range regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`).FindAllString(expr, -1) {
		if keywords[m] {
			continue
		}
		out = append(out, m)
	}
	return out
}

// TestMonitoringKit checks deploy/prometheus and deploy/grafana: promtool
// accepts the alert rules and passes their unit tests, every query of the
// Grafana dashboard parses (promtool, as recording rules), and every metric
// the alerts and the dashboard name is one a running serve exports (or
// Prometheus's own up).
func TestMonitoringKit(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is required (Debian's prometheus package; scripts/deps.sh installs it): %v", err)
	}
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{{"check", "rules", "slotproxy-alerts.yaml"}, {"test", "rules", "slotproxy-alerts.test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exported := exportedMetrics(t)
	exported["up"] = true // Prometheus's own, per scrape target

	// The alerts' metrics.
	var alerts struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "slotproxy-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &alerts); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			for _, m := range metricRefs(r.Expr) {
				checked++
				if !exported[m] {
					t.Errorf("alert %s names %s, which serve does not export", r.Alert, m)
				}
			}
		}
	}

	// The dashboard's queries.
	data, err = os.ReadFile(filepath.Join(deployDir, "grafana", "slotproxy-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string            `json:"title"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []panel `json:"panels"`
	}
	var exprs []string
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
				for _, m := range metricRefs(tg.Expr) {
					checked++
					if !exported[m] {
						t.Errorf("dashboard panel %q names %s, which serve does not export", p.Title, m)
					}
				}
			}
			walk(p.Panels)
		}
	}
	for _, raw := range dash.Panels {
		var p panel
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		walk([]panel{p})
	}
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has %d queries; the pattern is stale?", len(exprs))
	}
	// Grafana's variables replaced by what they stand for, each query as a
	// recording rule that promtool parses.
	var rulesFile strings.Builder
	rulesFile.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		e = strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(e)
		fmt.Fprintf(&rulesFile, "      - record: dashboard_query_%d\n        expr: %s\n", i, strconv.Quote(e))
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, []byte(rulesFile.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries do not parse: %v\n%s", err, out)
	}
	if checked < 30 {
		t.Fatalf("only %d metric references checked: the pattern is stale", checked)
	}
	// Every metric slotproxy registers is on the dashboard.
	onDashboard := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricRefs(e) {
			onDashboard[strings.TrimSuffix(m, "_bucket")] = true
		}
	}
	for name := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(base, "slotproxy_") && !onDashboard[base] && !onDashboard[name] {
			t.Errorf("metric %s is on no panel of the dashboard", base)
		}
	}
}

// unitFile parses a systemd unit into its keys (section.Key) and values,
// in order (a key may repeat).
func unitFile(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: not KEY=VALUE: %q", path, line)
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

// TestSystemdUnit checks deploy/systemd/slotproxy.service: systemd-analyze
// verify accepts it (with the test binary in ExecStart's place), it is
// Type=notify, and its commands do what it says: ExecStart's serve tells
// the notification socket READY=1 once it accepts clients, ExecReload (run
// by sh with $MAINPID, as systemd runs it) makes serve reload and say
// RELOADING=1 then READY=1, KillSignal stops it (STOPPING=1) well within
// TimeoutStopSec, which is longer than timeouts.shutdown; LimitNOFILE allows
// thousands of clients.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join(deployDir, "systemd", "slotproxy.service")
	u := unitFile(t, path)
	one := func(key string) string {
		t.Helper()
		if len(u[key]) != 1 {
			t.Fatalf("%s: want one %s, got %q", path, key, u[key])
		}
		return u[key][0]
	}
	if one("Service.Type") != "notify" {
		t.Errorf("Type=%s, want notify", one("Service.Type"))
	}
	stop, err := time.ParseDuration(one("Service.TimeoutStopSec"))
	if err != nil || stop <= config.Default().Timeouts.Shutdown {
		t.Errorf("TimeoutStopSec=%s: want longer than timeouts.shutdown (%v)", one("Service.TimeoutStopSec"), config.Default().Timeouts.Shutdown)
	}
	if n, err := strconv.Atoi(one("Service.LimitNOFILE")); err != nil || n < 10000 {
		t.Errorf("LimitNOFILE=%s: want at least 10000 (two per client)", one("Service.LimitNOFILE"))
	}
	start := strings.Fields(one("Service.ExecStart"))
	if len(start) < 4 || filepath.Base(start[0]) != "slotproxy" || start[1] != "serve" || start[2] != "--config" {
		t.Fatalf("ExecStart=%s, want slotproxy serve --config FILE", one("Service.ExecStart"))
	}
	if sig := one("Service.KillSignal"); sig != "SIGTERM" {
		t.Errorf("KillSignal=%s: serve shuts down gracefully on SIGTERM", sig)
	}

	// systemd-analyze verify, with this test's binary in place.
	if analyze, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Errorf("systemd-analyze is required to verify the unit (Debian's systemd package; scripts/deps.sh installs it): %v", err)
	} else {
		data, _ := os.ReadFile(path)
		text := strings.ReplaceAll(string(data), start[0], binary)
		unit := filepath.Join(t.TempDir(), "slotproxy.service")
		if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil || strings.Contains(string(out), "slotproxy.service:") {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}

	// Run the unit's commands as systemd would.
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	messages := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := ln.ReadFromUnix(buf)
			if err != nil {
				return
			}
			messages <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m := <-messages:
			if !strings.HasPrefix(m, want) {
				t.Fatalf("notification %q, want %q", m, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no %s notification within 15 s", want)
		}
	}
	listen := freeAddr(t)
	_, cfgPath := schemaConfig(t, listen)
	migrateSchema(t, cfgPath)
	args := append([]string{}, start[1:]...)
	args[2] = cfgPath
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	var stderr lockedWriter
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	next("READY=1")
	if c, err := net.DialTimeout("tcp", listen, 5*time.Second); err != nil {
		t.Fatalf("READY=1 but the client port does not answer: %v", err)
	} else {
		c.Close()
	}
	reload := exec.Command("sh", "-c", one("Service.ExecReload"))
	reload.Env = append(os.Environ(), "MAINPID="+strconv.Itoa(cmd.Process.Pid))
	if out, err := reload.CombinedOutput(); err != nil {
		t.Fatalf("ExecReload: %v\n%s", err, out)
	}
	next("RELOADING=1")
	next("READY=1")
	// The log line was written before READY=1; its copy from the pipe may
	// lag behind.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stderr.String(), `msg="reloaded rules"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("ExecReload did not reload the rules:\n%s", stderr.String())
			break
		}
	}
	began := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after KillSignal: %v\n%s", err, stderr.String())
	}
	if took := time.Since(began); took > stop {
		t.Errorf("serve took %v to stop, more than TimeoutStopSec %v", took, stop)
	}
}
