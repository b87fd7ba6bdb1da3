// Command olm-validate checks an OLM bundle folder (manifests/ and metadata/) with the
// validators of github.com/operator-framework/api, the library `operator-sdk bundle validate`
// runs: the bundle, its ClusterServiceVersion and its CRDs. operator-sdk itself is not served
// by the Go module proxy these machines use (docs/decisions.md). Exits 1 on any error.
package main

import (
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: olm-validate BUNDLE_DIR")
		os.Exit(2)
	}
	bundle, err := manifests.GetBundleFromDir(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: cannot read the bundle:", err)
		os.Exit(1)
	}
	errors := 0
	// As `operator-sdk bundle validate` does: the bundle, its CSV and CRDs as objects of
	// their own, and the optional object checks (the PodDisruptionBudget, RBAC).
	validators := validation.DefaultBundleValidators.WithValidators(validation.ObjectValidator)
	for _, result := range validators.Validate(bundle.ObjectsToValidate()...) {
		for _, e := range result.Errors {
			fmt.Println("error:", e)
			errors++
		}
		for _, w := range result.Warnings {
			fmt.Println("warning:", w)
		}
	}
	if errors > 0 {
		os.Exit(1)
	}
	fmt.Printf("bundle %s: valid (%d CRDs, %d other objects)\n", bundle.Name, len(bundle.V1CRDs)+len(bundle.V1beta1CRDs), len(bundle.Objects))
}
