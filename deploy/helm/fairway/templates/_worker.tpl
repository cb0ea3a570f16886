{{/*
A model's worker settings: workerDefaults with the entry's own keys over them.
Called with (dict "root" $ "model" $model); returns YAML (fromYaml it).
*/}}
{{- define "fairway.workerSettings" -}}
{{- toYaml (mergeOverwrite (deepCopy .root.Values.workerDefaults) (deepCopy .model)) -}}
{{- end -}}

{{- define "fairway.workerName" -}}
{{- printf "%s-worker-%s" (include "fairway.fullname" .root) .model.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The model folder inside the worker, per source. */}}
{{- define "fairway.modelPath" -}}
{{- $s := .source -}}
{{- if $s.pvc -}}
{{- printf "/models/%s" (default "" $s.pvc.path | trimPrefix "/") | trimSuffix "/" -}}
{{- else if $s.hostPath -}}
/models
{{- else -}}
/models/model
{{- end -}}
{{- end -}}
