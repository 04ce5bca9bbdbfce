// The Prometheus Operator's objects checked as a cluster with the operator
// checks them: against the openAPIV3Schema of the operator's CRDs
// (testdata/prometheus-operator/crd, from the operator's repository at the
// release its README names), with the validator the Kubernetes API server
// uses for custom resources (k8s.io/kube-openapi's), and, as kubectl apply
// --validate=strict asks the server, with no field the schema does not
// have (the server would drop it silently: a misspelt relabelings is a
// scrape without them). The CRDs' CEL rules (x-kubernetes-validations) are
// not evaluated.
package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	"sigs.k8s.io/yaml"
)

const crdDir = "testdata/prometheus-operator/crd"

var (
	crdOnce    sync.Once
	crdSchemas map[string]*spec.Schema // by kind, of the served version v1
	crdErr     error
)

// loadCRDSchemas reads the v1 schema of each CRD in crdDir.
func loadCRDSchemas(t *testing.T) map[string]*spec.Schema {
	t.Helper()
	crdOnce.Do(func() {
		files, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
		if len(files) == 0 {
			crdErr = fmt.Errorf("no CRDs in %s", crdDir)
			return
		}
		crdSchemas = map[string]*spec.Schema{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				crdErr = err
				return
			}
			var crd struct {
				Kind string `json:"kind"`
				Spec struct {
					Group string `json:"group"`
					Names struct {
						Kind string `json:"kind"`
					} `json:"names"`
					Versions []struct {
						Name   string `json:"name"`
						Served bool   `json:"served"`
						Schema struct {
							OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
						} `json:"schema"`
					} `json:"versions"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(b, &crd); err != nil {
				crdErr = fmt.Errorf("%s: %v", f, err)
				return
			}
			for _, v := range crd.Spec.Versions {
				if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group+"/"+v.Name != operatorAPI || !v.Served {
					continue
				}
				s := &spec.Schema{}
				if err := json.Unmarshal(v.Schema.OpenAPIV3Schema, s); err != nil {
					crdErr = fmt.Errorf("%s: %v", f, err)
					return
				}
				crdSchemas[crd.Spec.Names.Kind] = s
			}
		}
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
	return crdSchemas
}

// customResourceErrors returns what is wrong with a custom resource: its
// schema's violations, fields the schema does not have, and metadata that
// is not an ObjectMeta.
func customResourceErrors(t *testing.T, doc []byte) []string {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return []string{err.Error()}
	}
	kind, _ := obj["kind"].(string)
	schema, ok := loadCRDSchemas(t)[kind]
	if !ok {
		return []string{fmt.Sprintf("no CRD for kind %q in %s", kind, crdDir)}
	}
	var errs []string
	res := validate.NewSchemaValidator(schema, nil, "", strfmt.Default).Validate(obj)
	for _, e := range res.Errors {
		errs = append(errs, e.Error())
	}
	errs = append(errs, unknownFields("", obj, schema)...)
	// The CRD's schema says only "type: object" of the metadata; the API
	// server checks it as an ObjectMeta.
	meta, _ := json.Marshal(obj["metadata"])
	var om metav1.ObjectMeta
	if err := yaml.UnmarshalStrict(meta, &om); err != nil {
		errs = append(errs, "metadata: "+err.Error())
	}
	sort.Strings(errs)
	return errs
}

// validateCustomResource fails the test with customResourceErrors.
func validateCustomResource(t *testing.T, what string, doc []byte) {
	t.Helper()
	if errs := customResourceErrors(t, doc); len(errs) > 0 {
		t.Errorf("%s does not pass the operator's CRD schema:\n  %s", what, strings.Join(errs, "\n  "))
	}
}

// unknownFields lists the fields of v that s does not declare, as the API
// server's pruning would drop them: under properties, only the properties;
// under additionalProperties, any key, each checked against it;
// x-kubernetes-preserve-unknown-fields keeps anything below it.
func unknownFields(path string, v any, s *spec.Schema) []string {
	if s == nil {
		return nil
	}
	if keep, _ := s.Extensions.GetBool("x-kubernetes-preserve-unknown-fields"); keep {
		return nil
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			p := path + "." + k
			if p == ".metadata" {
				continue // checked as an ObjectMeta
			}
			if prop, ok := s.Properties[k]; ok {
				out = append(out, unknownFields(p, val, &prop)...)
			} else if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
				out = append(out, unknownFields(p, val, s.AdditionalProperties.Schema)...)
			} else if s.AdditionalProperties == nil || !s.AdditionalProperties.Allows {
				out = append(out, "unknown field "+strings.TrimPrefix(p, "."))
			}
		}
	case []any:
		if s.Items != nil && s.Items.Schema != nil {
			for i, val := range v {
				out = append(out, unknownFields(fmt.Sprintf("%s[%d]", path, i), val, s.Items.Schema)...)
			}
		}
	}
	return out
}

// The validator rejects what the API server would: a misspelt field (which
// the server would drop), a value of the wrong type, a value outside an
// enum, a required field missing; and accepts the base's ServiceMonitor.
func TestCRDSchemaValidatorRejects(t *testing.T) {
	good := `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: gpudiag, namespace: gpudiag, labels: {app.kubernetes.io/name: gpudiag}}
spec:
  jobLabel: app.kubernetes.io/name
  selector: {matchLabels: {app.kubernetes.io/name: gpudiag}}
  endpoints:
    - port: metrics
      interval: 15s
      relabelings:
        - {sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node, action: replace}
`
	if errs := customResourceErrors(t, []byte(good)); len(errs) > 0 {
		t.Fatalf("a valid ServiceMonitor fails: %v", errs)
	}
	for what, bad := range map[string]struct{ from, to, want string }{
		"misspelt field":  {"relabelings:", "relabellings:", "unknown field spec.endpoints[0].relabellings"},
		"wrong type":      {"interval: 15s", "interval: [15s]", "interval"},
		"enum":            {"action: replace", "action: rewrite", "action"},
		"required":        {"  endpoints:", "  xendpoints:", "unknown field spec.xendpoints"},
		"metadata":        {"namespace: gpudiag,", "namespaces: gpudiag,", "metadata"},
		"no such pattern": {"interval: 15s", "interval: 15 seconds", "interval"},
	} {
		doc := strings.Replace(good, bad.from, bad.to, 1)
		if doc == good {
			t.Fatalf("%s: %q not in the manifest", what, bad.from)
		}
		errs := customResourceErrors(t, []byte(doc))
		if !strings.Contains(strings.Join(errs, "\n"), bad.want) {
			t.Errorf("%s: errors %v; want one naming %q", what, errs, bad.want)
		}
	}
}
