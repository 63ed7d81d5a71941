// The admission bench's floor: the least an HTTPS admission webhook can do on this box (see main.go).
module hami-place/hack/admission-floor

go 1.26.0
