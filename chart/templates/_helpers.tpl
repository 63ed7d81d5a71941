{{/* Resource name prefix: <release>-webhook unless overridden. A release name may hold dots, a Service's name and a
namespace's may not: they become dashes. */}}
{{- define "hami-place.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | replace "." "-" | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (default "webhook" .Values.nameOverride) | replace "." "-" | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami-place.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hami-place.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hami-place
{{- end -}}

{{/* The name label is fixed: the plugin finds the server's Service by it. */}}
{{- define "hami-place.selectorLabels" -}}
app.kubernetes.io/name: gpu-descheduler-webhook
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "hami-place.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hami-place.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hami-place.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "hami-place.tlsSecretName" -}}
{{- if eq .Values.certs.mode "secret" -}}
{{- required "certs.existingSecret is required when certs.mode is secret" .Values.certs.existingSecret -}}
{{- else -}}
{{- printf "%s-tls" (include "hami-place.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* <fullname><suffix> within 63 characters: (list . "-certgen"). The fullname is cut first, so that the suffix is
never cut off (a fullname of 62 or 63 characters, from a long release name and nameOverride, gave the certificate
hook's objects the server's own ServiceAccount and ClusterRole names, which the hook's delete policies then
deleted). */}}
{{- define "hami-place.suffixed" -}}
{{- $suffix := index . 1 -}}
{{- printf "%s%s" (include "hami-place.fullname" (index . 0) | trunc (int (sub 63 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{/* The certificate hook's objects. */}}
{{- define "hami-place.certgenName" -}}
{{- include "hami-place.suffixed" (list . "-certgen") -}}
{{- end -}}

{{/* The certificate Job's account: the one named in certs.hook.serviceAccountName, else the chart's own hook one. */}}
{{- define "hami-place.certgenServiceAccountName" -}}
{{- .Values.certs.hook.serviceAccountName | default (include "hami-place.certgenName" .) -}}
{{- end -}}

{{/* Names the serving certificate must carry: every way the API server may address the Service. */}}
{{- define "hami-place.dnsNames" -}}
{{- $svc := include "hami-place.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.certs.clusterDomain) | toJson -}}
{{- end -}}

{{/* Namespaces the server skips and the webhook is never called for: its own, kube-system (whose pods bring a
cluster back, and must not wait on a webhook that is down), and the listed ones. */}}
{{- define "hami-place.excludedNamespaces" -}}
{{- concat (list .Release.Namespace "kube-system") .Values.server.excludeNamespaces | uniq | toJson -}}
{{- end -}}

{{/* Checks values.schema.json cannot express with a clear message. */}}
{{- define "hami-place.validate" -}}
{{- if and (eq .Values.certs.mode "secret") (not .Values.certs.caBundle) -}}
{{- fail "certs.caBundle (base64 PEM of the CA) is required when certs.mode is secret" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.apiServerCIDRs) -}}
{{- fail "networkPolicy.apiServerCIDRs (the API server's addresses, e.g. [10.0.0.10/32]) is required when networkPolicy.enabled: without them the API server could not call the webhook" -}}
{{- end -}}
{{- if and (eq .Values.certs.mode "hook") (not .Values.rbac.create) (not .Values.certs.hook.serviceAccountName) -}}
{{- fail "certs.hook.serviceAccountName (an account of the release namespace bound to the certificate Job's rules) is required with rbac.create=false and certs.mode hook: the chart then makes no RBAC for the Job, and its own account would have none" -}}
{{- end -}}
{{- if and .Values.server.clientCA.configMap (not .Values.server.clientCA.names) -}}
{{- fail "server.clientCA.names (the names the API server's client certificate carries, e.g. [kube-apiserver-webhook-client]) is required with server.clientCA.configMap: the CA alone admits every certificate it signed" -}}
{{- end -}}
{{- if and (ne .Values.service.type "ClusterIP") (not .Values.server.clientCA.configMap) (not .Values.networkPolicy.enabled) -}}
{{- fail (printf "service.type %s puts /mutate beyond the cluster, where anyone could send it forged reviews that hold placements; set server.clientCA (the API server's client certificate) or networkPolicy.enabled first, or keep ClusterIP" .Values.service.type) -}}
{{- end -}}
{{- $ports := list (int64 .Values.server.webhookPort) (int64 .Values.server.apiPort) (int64 .Values.server.probePort) -}}
{{- if lt (len (uniq $ports)) 3 -}}
{{- fail (printf "server.webhookPort, server.apiPort and server.probePort (%d, %d, %d) must differ: the server listens on each apart, and a port taken twice stops every replica at start (address in use)" (index $ports 0) (index $ports 1) (index $ports 2)) -}}
{{- end -}}
{{- if eq (int64 .Values.service.webhookPort) (int64 .Values.service.apiPort) -}}
{{- fail (printf "service.webhookPort and service.apiPort (%d) must differ: the API server refuses a Service with one port twice, after every other object of the release was made" (int64 .Values.service.apiPort)) -}}
{{- end -}}
{{- $window := splitList "-" (.Values.defrag.keepRoom.window | default "") -}}
{{- if and (eq (len $window) 2) (eq (first $window) (last $window)) -}}
{{- fail (printf "defrag.keepRoom.window: %s starts where it ends, which the server refuses (the controller would stay off); write START-END, e.g. 22:00-06:00, or \"\" for any time" .Values.defrag.keepRoom.window) -}}
{{- end -}}
{{- if has .Values.leases.namespace (list "kube-system" "kube-node-lease" "kube-public") -}}
{{- fail (printf "leases.namespace: %s holds Leases of other components (kube-system: kube-scheduler's and kube-controller-manager's leader Leases), which the server could then delete; leave it empty for a namespace of their own, or name one no one else uses" .Values.leases.namespace) -}}
{{- end -}}
{{- /* A budget that keeps every replica up lets no node drain go on: a percentage is rounded up, as the API server does. */ -}}
{{- $replicas := int64 .Values.replicaCount -}}
{{- $min := .Values.podDisruptionBudget.minAvailable -}}
{{- if gt $replicas 1 -}}
{{- $keeps := 0 -}}
{{- if kindIs "string" $min -}}
{{- if hasSuffix "%" $min -}}
{{- $keeps = div (add (mul (trimSuffix "%" $min | atoi) $replicas) 99) 100 -}}
{{- else -}}
{{- $keeps = atoi $min -}}
{{- end -}}
{{- else -}}
{{- $keeps = int64 $min -}}
{{- end -}}
{{- if ge (int64 $keeps) $replicas -}}
{{- fail (printf "podDisruptionBudget.minAvailable: %v keeps all %d replicas up, so no node drain could evict one; write at most %d (or a percentage that leaves one)" $min $replicas (sub $replicas 1)) -}}
{{- end -}}
{{- end -}}
{{- /* The schema bounds each part of a duration alone; its parts added up must not pass 720h either (MAX_DURATION). */ -}}
{{- $durations := dict "defrag.rescue.pendingFor" .Values.defrag.rescue.pendingFor "defrag.keepRoom.interval" .Values.defrag.keepRoom.interval "defrag.budgets.cooldown" .Values.defrag.budgets.cooldown "defrag.minPodAge" .Values.defrag.minPodAge -}}
{{- range $field, $value := $durations -}}
{{- if kindIs "string" $value -}}
{{- if gt (include "hami-place.seconds" $value | atoi) 2592000 -}}
{{- fail (printf "%s: %s adds up to more than 720h, the longest the server takes; write a duration of at most 720h" $field $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* cert-manager refuses a Certificate whose renewal window is not inside its lifetime, or either below its minimum
(1h, 5m): the webhook's certificate would never be issued, and the install would wait on a Secret that never comes. */ -}}
{{- if eq .Values.certs.mode "certManager" -}}
{{- $life := .Values.certs.certManager.duration -}}
{{- $renew := .Values.certs.certManager.renewBefore -}}
{{- $lifeSeconds := include "hami-place.seconds" $life | atoi -}}
{{- $renewSeconds := include "hami-place.seconds" $renew | atoi -}}
{{- if lt $lifeSeconds 3600 -}}
{{- fail (printf "certs.certManager.duration: %s is under 1h, the shortest certificate cert-manager issues; write 1h or more (e.g. 8760h)" $life) -}}
{{- end -}}
{{- if lt $renewSeconds 300 -}}
{{- fail (printf "certs.certManager.renewBefore: %s is under 5m, the shortest renewal window cert-manager takes; write 5m or more (e.g. 720h)" $renew) -}}
{{- end -}}
{{- if ge $renewSeconds $lifeSeconds -}}
{{- fail (printf "certs.certManager.renewBefore: %s is not shorter than duration %s, so cert-manager would refuse the Certificate; write a renewBefore under the duration (e.g. 720h for 8760h)" $renew $life) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The seconds of a duration written as 1h30m, 90s or 5m (hours, minutes and seconds, each part optional). */}}
{{- define "hami-place.seconds" -}}
{{- $seconds := 0 -}}
{{- range regexFindAll "[0-9]+[hms]" . -1 -}}
{{- $unit := get (dict "h" 3600 "m" 60 "s" 1) (regexFind "[hms]$" .) -}}
{{- $seconds = add $seconds (mul (regexReplaceAll "[hms]$" . "" | atoi) $unit) -}}
{{- end -}}
{{- $seconds -}}
{{- end -}}

{{/* Where the server's Leases live (the reqID guards and the controller's leader Lease): a namespace of their own,
<fullname>-leases, unless leases.namespace names one. The server may create, read, list and delete every Lease
there. */}}
{{- define "hami-place.leaseNamespace" -}}
{{- .Values.leases.namespace | default (include "hami-place.suffixed" (list . "-leases")) -}}
{{- end -}}

{{/* The DefragPolicy ConfigMap: <release>-defrag-policy in the release namespace. */}}
{{- define "hami-place.defragPolicyName" -}}
{{- printf "%s-defrag-policy" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* defrag.mode as the policy writes it: YAML reads a bare off/on in values as a boolean. */}}
{{- define "hami-place.defragMode" -}}
{{- $mode := .Values.defrag.mode -}}
{{- if kindIs "bool" $mode -}}
{{- ternary "on" "off" $mode -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{- define "hami-place.roomKeySecretName" -}}
{{- .Values.server.roomKey.existingSecret | default (printf "%s-room-key" (include "hami-place.fullname" .)) -}}
{{- end -}}
