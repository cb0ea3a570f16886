{{/* Names and labels. */}}
{{- define "fairway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fairway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fairway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fairway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fairway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fairway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fairway
{{- end -}}

{{- define "fairway.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "fairway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fairway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the secret key and the admin token. */}}
{{- define "fairway.appSecretName" -}}
{{- default (printf "%s-app" (include "fairway.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The Secret with the in-chart databases' password and URLs (trials). */}}
{{- define "fairway.trialSecretName" -}}
{{- printf "%s-trial-databases" (include "fairway.fullname" .) -}}
{{- end -}}

{{- define "fairway.databaseSecretRef" -}}
{{- if .Values.trialDatabases.enabled -}}
name: {{ include "fairway.trialSecretName" . }}
key: database-url
{{- else -}}
name: {{ required "database.existingSecret: name the Secret that holds the Postgres URL (or enable trialDatabases)" .Values.database.existingSecret }}
key: {{ .Values.database.secretKey }}
{{- end -}}
{{- end -}}

{{- define "fairway.redisSecretRef" -}}
{{- if .Values.trialDatabases.enabled -}}
name: {{ include "fairway.trialSecretName" . }}
key: redis-url
{{- else -}}
name: {{ required "redis.existingSecret: name the Secret that holds the Redis URL (or enable trialDatabases)" .Values.redis.existingSecret }}
key: {{ .Values.redis.secretKey }}
{{- end -}}
{{- end -}}

{{/*
A value kept across upgrades: the Secret's current value when it exists in the cluster (lookup
sees the cluster at install and upgrade), else a new random one. Offline renders (helm
template, the tests) always get a new one.
*/}}
{{- define "fairway.keptSecretValue" -}}
{{- $current := lookup "v1" "Secret" .namespace .name -}}
{{- if and $current $current.data (hasKey $current.data .key) -}}
{{- index $current.data .key -}}
{{- else -}}
{{- printf "%s%s" (default "" .prefix) (randAlphaNum (int .length)) | b64enc -}}
{{- end -}}
{{- end -}}

{{/* The served model name the API and the dispatcher are configured with: the first model's. */}}
{{- define "fairway.firstServedName" -}}
{{- with .Values.models -}}{{- (first .).servedName -}}{{- end -}}
{{- end -}}

{{/* Every model's served name but the first's, comma-separated (FAIRWAY_CATALOG_MODELS). */}}
{{- define "fairway.otherServedNames" -}}
{{- $names := list -}}
{{- range $m := rest .Values.models -}}{{- $names = append $names $m.servedName -}}{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/*
The environment every Fairway process shares: production mode, the connections and the
secrets from Secrets, logs, metrics binding, the data directory, and the user's FAIRWAY_*.
*/}}
{{- define "fairway.commonEnv" -}}
- name: FAIRWAY_ENVIRONMENT
  value: production
- name: FAIRWAY_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- include "fairway.databaseSecretRef" . | nindent 6 }}
- name: FAIRWAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- include "fairway.redisSecretRef" . | nindent 6 }}
- name: FAIRWAY_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "fairway.appSecretName" . }}
      key: secret-key
- name: FAIRWAY_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "fairway.appSecretName" . }}
      key: admin-token
- name: FAIRWAY_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: FAIRWAY_METRICS_HOST
  value: 0.0.0.0
- name: FAIRWAY_DATA_DIR
  value: /var/lib/fairway
- name: FAIRWAY_FILES_DIR
  value: /var/lib/fairway/files
- name: HOME
  value: /home/fairway
{{- /* 0 is a value too (no waiting room): test for null, not for truth. */}}
{{- if not (kindIs "invalid" .Values.waitingRoom.seconds) }}
- name: FAIRWAY_WAITING_ROOM_SECONDS
  value: {{ .Values.waitingRoom.seconds | quote }}
{{- end }}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The container security context of every Fairway container. */}}
{{- define "fairway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: {{ . }}
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Writable places: the data directory (files, unless a shared claim), HOME and /tmp. */}}
{{- define "fairway.dataVolumes" -}}
- name: data
  emptyDir: {}
- name: home
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if .Values.files.existingClaim }}
- name: files
  persistentVolumeClaim:
    claimName: {{ .Values.files.existingClaim }}
{{- end }}
{{- end -}}

{{- define "fairway.dataMounts" -}}
- name: data
  mountPath: /var/lib/fairway
- name: home
  mountPath: /home/fairway
- name: tmp
  mountPath: /tmp
{{- if .Values.files.existingClaim }}
- name: files
  mountPath: /var/lib/fairway/files
{{- end }}
{{- end -}}

{{/* Checks across values that the schema cannot express, with messages that say what to do. */}}
{{- define "fairway.validate" -}}
{{- range $name, $key := dict "FAIRWAY_WAITING_ROOM_SECONDS" "waitingRoom.seconds" "FAIRWAY_CATALOG_MODELS" "models[].servedName" -}}
{{- if hasKey $.Values.env $name -}}
{{- fail (printf "env.%s: the chart sets it from %s; set that instead" $name $key) -}}
{{- end -}}
{{- end -}}
{{- range $name := list "FAIRWAY_DATABASE_URL" "FAIRWAY_REDIS_URL" "FAIRWAY_SECRET_KEY" "FAIRWAY_ADMIN_TOKEN" -}}
{{- if or (hasKey $.Values.env $name) (hasKey $.Values.workerDefaults.env $name) -}}
{{- fail (printf "env.%s: connection URLs and secrets never go in values; the chart reads them from Secrets (database.existingSecret, redis.existingSecret, secrets.existingSecret)" $name) -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $i, $m := .Values.models -}}
{{- if hasKey $seen $m.name -}}
{{- fail (printf "models[%d].name %q is used twice: each model needs its own name" $i $m.name) -}}
{{- end -}}
{{- $_ := set $seen $m.name true -}}
{{- if hasKey $seen (printf "served:%s" $m.servedName) -}}
{{- fail (printf "models[%d].servedName %q is served by another entry: give one model one entry (raise its replicas)" $i $m.servedName) -}}
{{- end -}}
{{- $_ := set $seen (printf "served:%s" $m.servedName) true -}}
{{- $w := mergeOverwrite (deepCopy $.Values.workerDefaults) (deepCopy $m) -}}
{{- $sources := 0 -}}
{{- range $kind := list "pvc" "hostPath" "download" -}}
{{- if hasKey ($m.source | default dict) $kind -}}{{- $sources = add1 $sources -}}{{- end -}}
{{- end -}}
{{- if ne (int $sources) 1 -}}
{{- fail (printf "models[%d] (%s): source needs exactly one of pvc, hostPath or download" $i $m.name) -}}
{{- end -}}
{{- range $name := list "FAIRWAY_DATABASE_URL" "FAIRWAY_REDIS_URL" "FAIRWAY_SECRET_KEY" "FAIRWAY_ADMIN_TOKEN" -}}
{{- if hasKey ($m.env | default dict) $name -}}
{{- fail (printf "models[%d].env.%s: connection URLs and secrets never go in values; the chart reads them from Secrets" $i $name) -}}
{{- end -}}
{{- end -}}
{{- include "fairway.validateEngine" (dict "i" $i "m" $w) -}}
{{- include "fairway.validateScaleToZero" (dict "root" $ "i" $i "m" $w) -}}
{{- end -}}
{{- end -}}

{{/* A model's engine against its GPUs: called with (dict "i" index "m" merged settings). */}}
{{- define "fairway.validateEngine" -}}
{{- $m := .m -}}
{{- $where := printf "models[%d] (%s)" (int .i) $m.name -}}
{{- $gpus := int $m.gpu.count -}}
{{- $tp := int $m.engine.tensorParallelSize -}}
{{- if eq (default "gpu" $m.engine.device) "cpu" -}}
{{- if gt $gpus 0 -}}
{{- fail (printf "%s: engine.device is cpu but gpu.count is %d: a CPU engine uses no GPU; set gpu.count: 0, or engine.device: gpu" $where $gpus) -}}
{{- end -}}
{{- if gt $tp 1 -}}
{{- fail (printf "%s: engine.tensorParallelSize %d needs a GPU engine (engine.device is cpu)" $where $tp) -}}
{{- end -}}
{{- else -}}
{{- if eq $gpus 0 -}}
{{- fail (printf "%s: engine.device is gpu but gpu.count is 0: a GPU engine needs at least one GPU; for a CPU trial set engine.device: cpu (an image built with ENGINE_EXTRA=cpu)" $where) -}}
{{- end -}}
{{- if ne $tp $gpus -}}
{{- fail (printf "%s: engine.tensorParallelSize %d but gpu.count %d: one engine spans exactly tensorParallelSize GPUs; set both to the same number" $where $tp $gpus) -}}
{{- end -}}
{{- if and (hasPrefix "nvidia.com/mig-" $m.gpu.resourceName) (gt $gpus 1) -}}
{{- fail (printf "%s: gpu.count %d of %s: a process sees one MIG slice only, so an engine cannot span several; use a larger profile, or whole GPUs (nvidia.com/gpu) for tensor parallelism" $where $gpus $m.gpu.resourceName) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Scale to zero's preconditions: called with (dict "root" $ "i" index "m" merged settings). */}}
{{- define "fairway.validateScaleToZero" -}}
{{- $a := default dict .m.autoscaling -}}
{{- if $a.scaleToZero -}}
{{- $where := printf "models[%d] (%s)" (int .i) .m.name -}}
{{- if not .root.Values.autoscaling.keda.enabled -}}
{{- fail (printf "%s: autoscaling.scaleToZero needs KEDA (autoscaling.keda.enabled: true); without it the model keeps its replicas" $where) -}}
{{- end -}}
{{- if hasKey $a "minReplicas" -}}
{{- fail (printf "%s: autoscaling.scaleToZero and autoscaling.minReplicas are both set: scale to zero is minReplicas 0; drop one" $where) -}}
{{- end -}}
{{- $room := .root.Values.waitingRoom.seconds -}}
{{- if and (not (kindIs "invalid" $room)) (eq (int $room) 0) -}}
{{- fail (printf "%s: autoscaling.scaleToZero needs the waiting room, but waitingRoom.seconds is 0: a request for the model at zero would fail at once instead of waking it" $where) -}}
{{- end -}}
{{- end -}}
{{- end -}}
