package tools

import (
	"maps"
	"slices"
	"strings"
)

// Where says where a tool's calls run, so that its description can say
// what is true there (a model plans from it): in a session or one-shot,
// and what the sandbox image holds.
type Where struct {
	// Session is set when the calls run in a session: they share its
	// sandbox, workspace and (python_repl) interpreter. OneShot is set
	// when they run outside one: each in a fresh sandbox. Neither: the
	// description must be true for both.
	Session, OneShot bool
	// Image is what the image the calls run in holds; nil when unknown
	// (not probed yet, or the probe failed): a description then promises
	// only the standard library.
	Image *ImageFacts
}

// ImageFacts is what a probe of a sandbox image found.
type ImageFacts struct {
	// Python is the interpreter's version ("3.11.2"); "" when the image
	// has none.
	Python string `json:"python,omitempty"`
	// Packages are the probed Python packages present, import name →
	// version ("" when the version is unknown).
	Packages map[string]string `json:"packages,omitempty"`
	// Missing are the probed packages absent, in probe order.
	Missing []string `json:"missing,omitempty"`
}

// PackageList renders the present packages, sorted: "matplotlib 3.6.3,
// numpy 1.24.2".
func (f *ImageFacts) PackageList() string {
	if f == nil || len(f.Packages) == 0 {
		return ""
	}
	var b strings.Builder
	for i, name := range slices.Sorted(maps.Keys(f.Packages)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(name)
		if v := f.Packages[name]; v != "" {
			b.WriteString(" " + v)
		}
	}
	return b.String()
}

// DescriptionIn is t's description where its calls run: Describe's when
// the tool has one, else Description.
func (t *Tool) DescriptionIn(w Where) string {
	if t.Describe == nil {
		return t.Description
	}
	return t.Describe(w)
}

// In returns a copy of t whose Description is DescriptionIn(w); t itself
// when its description does not depend on where it runs.
func (t *Tool) In(w Where) *Tool {
	if t.Describe == nil {
		return t
	}
	c := *t
	c.Description = t.Describe(w)
	return &c
}

// ExportIn is Export with every tool's description as true where the
// calls run (Tool.In).
func (r *Registry) ExportIn(f Format, w Where, names ...string) ([]map[string]any, error) {
	return r.export(f, &w, names...)
}
